"""Golden files of what each rule prints: for every firing [[test]] case of every rule, the finding exactly as
`check` (or `build-kernels`) shows it, in tests/goldens/rules/<CODE>.txt.

A wording change to a rule is a diff in review. After an intended change, regenerate and review:
`.venv/bin/python -m pytest -q tests/doctor/test_goldens.py tests/trainer/test_golden_loss.py --update-goldens`.
"""

from __future__ import annotations

import pytest
from helpers import GOLDENS, UPDATE_GOLDENS_ENV, case_findings, check_golden, updating_goldens
from rich.text import Text

from olmo_doctor.render import finding_block
from olmo_doctor.rules.model import load_rules

RULES = [r for r in load_rules() if any(c.fires for c in r.cases)]
RULE_GOLDENS = GOLDENS / "rules"


def rendered(rule) -> str:
    """Each firing case's finding as plain text (the terminal colours stripped), headed by the case's index."""
    parts = []
    for i, case in enumerate(rule.cases):
        if not case.fires:
            continue
        parts.append(f"## case {i}")
        for finding in case_findings(rule, case):
            parts += [Text.from_markup(line).plain for line in finding_block(finding)]
    return "\n".join(parts) + "\n"


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_text_matches_its_golden_file(rule) -> None:
    check_golden(RULE_GOLDENS / f"{rule.code}.txt", rendered(rule))


def test_no_golden_file_without_its_rule() -> None:
    stale = sorted(p for p in RULE_GOLDENS.glob("*.txt") if p.stem not in {r.code for r in RULES})
    if updating_goldens():
        for path in stale:
            path.unlink()
        return
    assert not stale, f"golden files of rules that no longer exist or fire: {[p.name for p in stale]}"


def test_a_changed_or_missing_golden_fails(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPDATE_GOLDENS_ENV, raising=False)
    golden = tmp_path / "X.txt"
    with pytest.raises(pytest.fail.Exception, match="no golden file"):
        check_golden(golden, "a\n")
    golden.write_text("a\n")
    check_golden(golden, "a\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)differs.*-a\n\+b"):
        check_golden(golden, "b\n")
    monkeypatch.setenv(UPDATE_GOLDENS_ENV, "1")
    check_golden(golden, "b\n")
    assert golden.read_text() == "b\n"
