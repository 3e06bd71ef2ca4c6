"""`diagnose` on the toolchain causes (OD1xx signatures), beyond what every cause gets (its two log fixtures,
tests/doctor/test_diagnose_fixtures.py; its public corpus cases with and without their facts, test_diagnose_corpus.py;
its example lines, test_diagnose_signatures.py): lines that look like a failure but are not one, and the examples
each toolchain rule must document."""

from __future__ import annotations

from olmo_doctor.diagnose import diagnose_text
from olmo_doctor.rules.model import load_rules

TOOLCHAIN_RULES = [r for r in load_rules() if r.code.startswith("OD1") and r.signatures]


def test_accepted_minor_mismatch_is_not_a_cause() -> None:
    """DeepSpeed's 'accepting this combination' line and torch's minor-mismatch warning are not failures."""
    log = (
        "Installed CUDA version 12.6 does not match the version torch was compiled with 12.4 but since the APIs "
        "are compatible, accepting this combination\n"
        "UserWarning: The detected CUDA version (12.6) has a minor version mismatch with the version that was "
        "used to compile PyTorch (12.4). Most likely this shouldn't be a problem.\n"
    )
    findings = diagnose_text(log)
    assert all(f.code != "OD110" for f in findings)


def test_toolchain_rules_document_their_log_lines() -> None:
    """Each toolchain rule with signatures has a [diagnose] title and example lines (which
    test_diagnose_signatures.py then matches against its signatures)."""
    for rule in TOOLCHAIN_RULES:
        assert rule.diagnose.get("title") and rule.diagnose.get("fires"), (
            f"{rule.code}: add a [diagnose] title and example lines")
