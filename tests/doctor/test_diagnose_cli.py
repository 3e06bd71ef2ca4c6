"""`olmo-doctor diagnose` through the real CLI: exit codes, JSON shape, stdin, --report / --here, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from tests.machines import H200_CAPTURE

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
H200 = H200_CAPTURE / "collect_env.txt"
OOM_LOG = LOGS / "compile_oom_killed" / "flash-attn-cicc-killed.log"
runner = CliRunner()


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """A fresh process, as a user runs it (stderr and exit code exactly as printed)."""
    return subprocess.run([sys.executable, "-m", "olmo_doctor", "diagnose", *args], input=stdin,
                          capture_output=True, timeout=120)


def test_text_names_the_root_cause_with_quoted_lines_and_fix() -> None:
    res = runner.invoke(app, ["diagnose", str(OOM_LOG)])
    assert res.exit_code == 1, res.output
    out = res.output
    assert "Root cause: OD210" in out
    assert "     14 │ nvcc error   : 'cicc' died due to signal 9 (Kill signal)" in out
    assert "MAX_JOBS" in out and "fix:" in out
    assert out.index("Root cause") < out.index("Details and sources")


def test_json_has_the_check_shape_plus_matched_lines_and_confidence() -> None:
    res = runner.invoke(app, ["diagnose", str(OOM_LOG), "--json"])
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert set(data) == {"facts", "findings", "env", "elapsed_s", "input_cut"}
    assert data["input_cut"] is None  # the whole log was scanned
    assert data["facts"] == {} and data["env"] == {} and isinstance(data["elapsed_s"], float)
    top = data["findings"][0]
    assert set(top) >= {"code", "cause", "severity", "title", "message", "fixes", "matched_lines", "confidence"}
    assert top["cause"] == "compile_oom_killed"
    assert {"line": 14, "text": "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"} in top["matched_lines"]
    confidences = [f["confidence"] for f in data["findings"]]
    assert confidences == sorted(confidences, reverse=True)


def test_a_fix_with_a_blank_value_is_never_automatic() -> None:
    data = json.loads(runner.invoke(app, ["diagnose", str(OOM_LOG), "--json"]).stdout)
    fix = data["findings"][0]["fixes"][0]
    assert "<N>" in fix["commands"][0] and fix["applicability"] == "manual" and not fix["automatic"]


def test_stdin_and_dash() -> None:
    proc = cli("-", stdin=OOM_LOG.read_bytes())
    assert proc.returncode == 1
    assert b"standard input" in proc.stdout and b"OD210" in proc.stdout


def test_nothing_recognised_exits_0_and_says_what_to_collect(tmp_path: Path) -> None:
    log = tmp_path / "odd.log"
    log.write_text("step 1\nTraceback (most recent call last):\nValueError: something odd happened\n")
    res = runner.invoke(app, ["diagnose", str(log)])
    assert res.exit_code == 0
    assert "No known root cause" in res.output and "all clear" not in res.output.lower()
    assert "      3 │ ValueError: something odd happened" in res.output
    assert "What to collect next" in res.output and "--here" in res.output


@pytest.mark.parametrize(("content", "needle"), [(b"", b"is empty"), (bytes(range(256)) * 40, b"binary")])
def test_unreadable_input_exits_2_with_one_line(content: bytes, needle: bytes, tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(content)
    proc = cli(str(log))
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.count(b"\n") == 1 and needle in proc.stderr and b"Traceback" not in proc.stderr


def test_missing_file_and_conflicting_options_exit_2(tmp_path: Path) -> None:
    assert cli(str(tmp_path / "none.log")).returncode == 2
    proc = cli(str(OOM_LOG), "--report", str(H200), "--here")
    assert proc.returncode == 2 and b"not both" in proc.stderr


def test_report_facts_join_the_log() -> None:
    res = runner.invoke(app, ["diagnose", str(OOM_LOG), "--report", str(H200), "--json"])
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    assert data["facts"]["gpu.0.name"] == "NVIDIA H200"
    assert data["findings"][0]["cause"] == "compile_oom_killed"


def test_report_that_is_not_a_report_exits_2(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello\n")
    proc = cli(str(OOM_LOG), "--report", str(bogus))
    assert proc.returncode == 2 and proc.stderr.count(b"\n") == 1


def test_here_uses_this_machines_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo_doctor.api

    facts = {"shm.size_gb": 0.06, "os.container": "docker"}
    monkeypatch.setattr(olmo_doctor.api, "gather_facts", lambda *a, **k: dict(facts))
    res = runner.invoke(app, ["diagnose", str(LOGS / "nccl_shm" / "docker-default-shm.log"), "--here", "--json"])
    data = json.loads(res.stdout)
    assert data["facts"]["shm.size_gb"] == 0.06
    top = data["findings"][0]
    assert top["cause"] == "nccl_shm" and top["title"].startswith("Shared memory")


def test_symptoms_alone_do_not_name_a_cause(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 100 loss 2.31\nstep 101 loss 2.30\nKilled\n")
    res = runner.invoke(app, ["diagnose", str(log)])
    assert res.exit_code == 0, res.output
    assert "No known root cause" in res.output and "Root cause" not in res.output
    assert "Lines that often follow these causes" in res.output and "OD210" in res.output
