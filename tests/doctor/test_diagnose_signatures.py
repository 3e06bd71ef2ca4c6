"""Every rule's log signatures: the example lines in its `[diagnose]` table match (`fires`) or do not (`quiet`),
and every signature can be prefiltered by a literal (no signature silently slows the scan down)."""

from __future__ import annotations

import re

import pytest

from olmo_doctor.diagnose.literals import candidates, required
from olmo_doctor.diagnose.scan import Index
from olmo_doctor.rules.model import load_rules

RULES = load_rules()
EXAMPLES = [(rule, kind, line) for rule in RULES for kind in ("fires", "quiet")
            for line in rule.diagnose.get(kind, [])]


@pytest.mark.parametrize(("rule", "kind", "line"), EXAMPLES,
                         ids=[f"{r.code}-{k}-{i}" for i, (r, k, _) in enumerate(EXAMPLES)])
def test_signature_examples(rule, kind, line) -> None:
    matched = [s.pattern.pattern for s in rule.signatures if s.pattern.search(line)]
    if kind == "fires":
        assert matched, f"{rule.code}: no signature matches {line!r}"
    else:
        assert not matched, f"{rule.code}: {matched} match the near-miss {line!r}"


def test_rules_with_signatures_document_examples_in_our_range() -> None:
    for rule in RULES:
        if rule.code.startswith("OD2") and rule.signatures:
            assert rule.diagnose.get("fires"), f"{rule.code}: add [diagnose] fires = [example log lines]"
            assert rule.diagnose.get("quiet"), f"{rule.code}: add [diagnose] quiet = [near-miss lines]"


def test_every_signature_has_a_literal_for_the_prefilter() -> None:
    index = Index.build(RULES)
    slow = [f"{r.rule.code}: {r.pattern.pattern}" for r in index.slow]
    assert not slow, "signatures without a 3+ character literal run on every line:\n" + "\n".join(slow)


@pytest.mark.parametrize(("pattern", "expected"), [
    ("Killed signal terminated program (cc1plus|cicc)", {"killed signal terminated program "}),
    ("(No space left on device|Errno 28)", {"no space left on device", "errno 28"}),
    (r"^\s*Killed\s*$", {"killed"}),
    (r"[Kk]illed by (?:the )?OOM", {"killed by "}),
    (r"a.*b", None),
])
def test_required_literals(pattern: str, expected: set[str] | None) -> None:
    got = required(pattern)
    if expected is None:
        assert got is None or min(len(s) for s in got) < 3
    else:
        assert got is not None and set(got) == expected


def test_every_match_contains_a_required_string() -> None:
    """The prefilter is sound: whatever a signature matches contains one string of each of its requirements."""
    for rule in RULES:
        for sig in rule.signatures:
            for line in rule.diagnose.get("fires", []):
                m = sig.pattern.search(line)
                if not m:
                    continue
                for alt in candidates(sig.pattern):
                    assert any(s in line.lower() for s in alt), (rule.code, sig.pattern.pattern, alt, line)
                    assert re.search(sig.pattern, line)


@pytest.mark.parametrize(("pattern", "expected"), [
    ("Killed signal terminated program cc1plus", True),
    (r"a(?=b)c|d", True),
    (r"^\s*Killed\s*$", False),
    (r"(?:^|[\s:])ninja: not found", False),
    (r"(?<!\w)nvcc", False),
    (r"x(?:y|$)", False),
])
def test_plain_patterns(pattern: str, expected: bool) -> None:
    from olmo_doctor.diagnose.literals import plain

    assert plain(pattern) is expected


PREFIXED = [(rule, line) for rule, kind, line in EXAMPLES if kind == "fires"]


@pytest.mark.parametrize("prefix", ["      │ ", "#14 611.3 ", "[1,0]<stderr>:", "Downloading 10%\r"])
def test_every_example_is_found_behind_tool_prefixes(prefix: str) -> None:
    """The scan's shortcuts (one search on the raw line for plain signatures, remembered misses) find every
    documented example line behind the prefixes tools put before it, with the right line number."""
    from olmo_doctor.diagnose import diagnose

    log, where = ["noise"], []
    for rule, line in PREFIXED:  # one log: example lines between noise lines (line 2, 4, 6, ...)
        log += [f"{prefix}{line}", "more noise"]
        where.append((rule, line, len(log) - 1))
    diag = diagnose(["\n".join(log) + "\n"], None, RULES)
    found = {(h.ref.rule.cause, h.line) for ev in diag.evidence for h in ev.hits}
    missed = [f"{rule.code} line {n}: {line!r}" for rule, line, n in where if (rule.cause, n) not in found]
    assert not missed, "\n".join(missed)
