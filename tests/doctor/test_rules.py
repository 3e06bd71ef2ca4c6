"""Every rule in known_issues/ loads, and each embedded [[test]] case fires or stays quiet as it says; every
finding code is a rule; the cause table and the fix-action schema are each declared once and documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT, case_findings

from olmo_doctor.render import area_status
from olmo_doctor.rules.actions import OPS
from olmo_doctor.rules.causes import AREAS, RuleError, parse_causes
from olmo_doctor.rules.model import cause_areas, causes, load_rules

RULES = load_rules()
CASES = [(rule, i, case) for rule in RULES for i, case in enumerate(rule.cases)]


def test_rules_load_and_have_cases() -> None:
    assert RULES, "no rules found in known_issues/"
    for rule in RULES:
        judged = rule.when or rule.check or rule.for_build
        assert any(c.fires for c in rule.cases) or not judged, f"{rule.code}: no firing case"
        if judged:
            assert any(not c.fires for c in rule.cases), f"{rule.code}: no quiet case"


def test_every_signature_compiles() -> None:
    for rule in RULES:
        for i, sig in enumerate(rule.signatures):
            try:
                sig.pattern  # noqa: B018 - compiling is the test
            except re.error as e:
                pytest.fail(f"{rule.code} signature[{i}] {sig.source!r}: {e}")


def test_every_check_function_exists() -> None:
    """Each rule's `check` names a registered condition of its kind: build rules a build condition, others a fact
    condition; every registered condition is used by some rule, and none holds a finding code of its own."""
    from olmo_doctor.checks import CHECKS, resolve

    for rule in RULES:
        if rule.check:
            found = resolve(rule.check)
            assert found is not None and callable(found.func), rule.code
            assert found.needs_build == rule.for_build, rule.code
        else:
            assert not rule.for_build, f"{rule.code}: a build rule without its condition"
    assert set(CHECKS) == {r.check for r in RULES if r.check}, "a registered condition no rule names"
    for path in (ROOT / "olmo_doctor" / "checks").glob("*.py"):
        assert not re.search(r'["\'](?:OD|BK)\d{3}["\']', path.read_text()), f"{path.name}: a code outside rules"


def test_causes_are_from_vocabulary() -> None:
    vocab = causes()
    assert "compile_oom_killed" in vocab
    assert all(rule.cause in vocab for rule in RULES)


@pytest.mark.parametrize(
    ("rule", "index", "case"), CASES, ids=[f"{r.code}-{i}-{'fires' if c.fires else 'quiet'}" for r, i, c in CASES]
)
def test_rule_case(rule, index, case) -> None:
    found = case_findings(rule, case)
    assert bool(found) == case.fires, f"{rule.code} case {index}: expected {'fire' if case.fires else 'quiet'}"
    for finding in found:
        assert finding.title and finding.message
        assert "{" not in finding.title, f"unrendered template in {finding.title!r}"
        if rule.for_build:  # the planner passes every field its templates name
            for text in (finding.title, finding.message, *(c for f in finding.fixes for c in f.commands)):
                assert "unknown" not in text, f"{rule.code}: a template field the planner did not fill: {text!r}"


def test_cause_areas_come_from_the_cause_table() -> None:
    areas = cause_areas()
    assert set(areas) == set(causes()) and set(areas.values()) <= set(AREAS)
    assert areas["nccl_failure"] == "GPU" and areas["missing_submodule"] == "Kernels"
    from olmo_doctor.findings import Finding

    nccl = Finding(code="OD228", cause="nccl_failure", severity="error", title="t", message="m")
    status = area_status([nccl])
    assert status["GPU"] == "error" and status["Machine"] == "ok"


@pytest.mark.parametrize(("row", "needle"), [
    ("| new_cause | a meaning without its area |", "must read"),
    ("| new_cause | Network | some meaning |", "area 'Network'"),
    ("| Bad-Slug | GPU | some meaning |", "must read"),
])
def test_a_bad_cause_row_fails_at_load(row: str, needle: str) -> None:
    text = (ROOT / "known_issues" / "CAUSES.md").read_text() + row + "\n"
    with pytest.raises(RuleError, match=needle):
        parse_causes(text)


def _schema_table(section: str) -> list[list[str]]:
    text = (ROOT / "known_issues" / "SCHEMA.md").read_text()
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
            if line.startswith("| `")]
    assert rows, f"SCHEMA.md has no table under '## {section}'"
    return rows


def test_schema_md_documents_exactly_the_action_ops() -> None:
    """known_issues/SCHEMA.md's Fix actions table against rules/actions.py's OPS: same ops, same fields."""
    documented = {}
    for op, fields, _effect in _schema_table("Fix actions"):
        documented[op.strip("`")] = re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", fields))  # not the examples
    assert documented == {op: list(fields) for op, fields in OPS.items()}


def test_schema_md_names_files_that_exist() -> None:
    text = (ROOT / "known_issues" / "SCHEMA.md").read_text()
    for ref in re.findall(r"`((?:olmo_doctor|known_issues|tests)/[\w/.]+)`", text):
        assert (ROOT / ref).exists(), f"SCHEMA.md points at {ref}, which does not exist"
    causes_md = (ROOT / "known_issues" / "CAUSES.md").read_text()
    for ref in re.findall(r"`((?:olmo_doctor|known_issues|tests)/[\w/.]+)`", causes_md):
        assert (ROOT / ref).exists(), f"CAUSES.md points at {ref}, which does not exist"


HEAD = 'name = "x"\ncause = "no_gpu"\nseverity = "error"\ntitle = "t"\nmessage = "m"\nsources = ["https://e.org"]\n'


@pytest.mark.parametrize(("name", "body", "needle"), [
    ("BK900-x.toml", 'code = "BK900"\nscope = ["build"]\nwhen = "gpu.count == 0"\n', "build rule"),
    ("BK901-x.toml", 'code = "BK901"\nscope = ["build"]\ncheck = "build.no_gpu"\n[[test]]\n'
     'fires = { "gpu.count" = 0 }\n', "names the request"),
    ("OD900-x.toml", 'code = "OD900"\ncheck = "compile_jobs_exceed_memory"\n', "not a registered check"),
    ("OD902-x.toml", 'code = "OD902"\ncheck = "build.no_gpu"\n', "not a registered check"),
    ("BK902-x.toml", 'code = "BK902"\nscope = ["build"]\ncheck = "memory.compile_jobs_exceed_memory"\n', "build rule"),
    ("XY900-x.toml", 'code = "XY900"\nwhen = "gpu.count == 0"\n', "must look like OD123"),
])
def test_malformed_rules_are_refused_at_load(tmp_path: Path, name: str, body: str, needle: str) -> None:
    """A build rule with a `when`, a build case without its request, a check outside any module, a code of no
    known range: each is a RuleError naming the file, never a rule that silently does something else."""
    (tmp_path / name).write_text(body + HEAD if "[[test]]" not in body else HEAD + body)
    with pytest.raises(RuleError, match=needle):
        load_rules(tmp_path)
