"""The project's own failure logs (tests/fixtures/logs/<cause>/*.log): each names its folder's cause first.

Every cause of the vocabulary has at least two logs, written to reproduce the real error lines with the noise
around them (pip boxes, docker build prefixes, NCCL INFO chatter, progress bars, tracebacks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.diagnose import diagnose_file
from olmo_doctor.rules.model import causes, load_rules

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
FIXTURES = sorted(LOGS.glob("*/*.log"))


def test_every_cause_has_two_fixtures() -> None:
    # every cause diagnose can name: a cause only build-kernels' plan raises (no rule of it reads logs) has none
    vocabulary = {r.cause for r in load_rules() if r.signatures}
    assert vocabulary <= set(causes())
    per_cause = {cause: len(list((LOGS / cause).glob("*.log"))) for cause in vocabulary}
    thin = {cause: n for cause, n in per_cause.items() if n < 2}
    assert not thin, f"causes with fewer than 2 log fixtures: {thin}"
    strays = {p.parent.name for p in FIXTURES} - set(causes())
    assert not strays, f"fixture folders that are not causes: {strays}"


@pytest.mark.parametrize("log", FIXTURES, ids=[f"{p.parent.name}/{p.name}" for p in FIXTURES])
def test_fixture_names_its_cause_first(log: Path) -> None:
    findings = diagnose_file(log)
    assert findings, f"{log.name}: nothing recognised"
    top = findings[0]
    assert top.cause == log.parent.name, [(f.code, f.cause, f.confidence) for f in findings[:3]]
    assert top.matched_lines, "the root cause must quote the log lines that show it"
    lines = log.read_text().split("\n")
    for m in top.matched_lines:  # the quoted line numbers point at the quoted text
        assert lines[m.line - 1].strip()[-30:].strip() in m.text or m.text[:30] in lines[m.line - 1]
    confidences = [f.confidence or 0.0 for f in findings]
    assert 0 < confidences[0] <= 1
    assert confidences == sorted(confidences, reverse=True)
