"""`olmo-doctor explain CODE --json` is exactly one JSON object holding what the text shows; the commands the
doctor prints with a path in them (`report`'s `check --from-report PATH`) paste back into exactly that path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import run_cli
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.rules.model import load_rules

RUNNER = CliRunner()


def _bash_words(text: str, cwd: Path) -> list[str]:
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {text}"], capture_output=True, check=True, cwd=cwd)
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r.code)
def test_explain_json_is_one_object_with_what_the_text_says(rule: object) -> None:
    code = rule.code  # type: ignore[attr-defined]
    res = RUNNER.invoke(app, ["explain", code, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)  # the whole output is one JSON document
    assert isinstance(data, dict) and data["code"] == code
    text = RUNNER.invoke(app, ["explain", code]).stdout
    assert data["title"] in text and data["what"] in text and data["why"] in text
    for fix in data["fixes"]:
        assert fix["title"] in text and all(f"$ {c}" in text for c in fix["commands"])
    assert all(s in text for s in data["sources"])
    assert data["severity"] in ("error", "warning", "info")


def test_explain_json_of_an_unknown_rule_is_a_usage_error() -> None:
    res = run_cli("explain", "OD999", "--json")
    assert res.returncode == 2 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # two full checks of this machine
def test_report_hint_pastes_into_check_from_report(tmp_path: Path) -> None:
    out = tmp_path / "my reports [1]" / "it's $HOME.json"
    out.parent.mkdir()
    res = RUNNER.invoke(app, ["report", "-o", str(out)])
    assert res.exit_code == 0, res.output
    hint = res.stdout.split("read it anywhere with: ", 1)[1].strip()
    words = _bash_words(hint, tmp_path)
    assert words == ["olmo-doctor", "check", "--from-report", str(out)]
    again = RUNNER.invoke(app, words[1:])
    assert again.exit_code in (0, 1), again.output  # it read the report (findings or none), no usage error
