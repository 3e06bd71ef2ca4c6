"""Every rule in known_issues/ loads, and each embedded [[test]] case fires or stays quiet as it says."""

from __future__ import annotations

import re

import pytest

from olmo_doctor.rules.engine import fires, to_finding
from olmo_doctor.rules.model import causes, load_rules

RULES = load_rules()
CASES = [(rule, i, case) for rule in RULES for i, case in enumerate(rule.cases)]


def test_rules_load_and_have_cases() -> None:
    assert RULES, "no rules found in known_issues/"
    for rule in RULES:
        assert any(c.fires for c in rule.cases) or not (rule.when or rule.check), f"{rule.code}: no firing case"
        if rule.when or rule.check:
            assert any(not c.fires for c in rule.cases), f"{rule.code}: no quiet case"


def test_every_signature_compiles() -> None:
    for rule in RULES:
        for i, sig in enumerate(rule.signatures):
            try:
                sig.pattern  # noqa: B018 - compiling is the test
            except re.error as e:
                pytest.fail(f"{rule.code} signature[{i}] {sig.source!r}: {e}")


def test_causes_are_from_vocabulary() -> None:
    vocab = causes()
    assert "compile_oom_killed" in vocab
    assert all(rule.cause in vocab for rule in RULES)


@pytest.mark.parametrize(
    ("rule", "index", "case"), CASES, ids=[f"{r.code}-{i}-{'fires' if c.fires else 'quiet'}" for r, i, c in CASES]
)
def test_rule_case(rule, index, case) -> None:
    fired, extra, bound = fires(rule, case.facts)
    assert fired == case.fires, f"{rule.code} case {index}: expected {'fire' if case.fires else 'quiet'}"
    if fired:
        finding = to_finding(rule, bound, extra)
        assert finding.title and finding.message
        assert "{" not in finding.title, f"unrendered template in {finding.title!r}"
