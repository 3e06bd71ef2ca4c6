"""A report's silence is unknown, not absent: `?` in text, listed under "unknown" in JSON, and rules that test for
absence stay quiet; what a report does state as absent (a CPU build, torch not importable) still counts."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from olmo_doctor.api import run_check
from olmo_doctor.cli import app
from olmo_doctor.render import area_lines
from olmo_doctor.rules.expr import truth
from tests.helpers import FIXTURES

REPORTS = FIXTURES / "reports"
runner = CliRunner()


def test_text_shows_unknown_as_question_marks() -> None:
    res = runner.invoke(app, ["check", "--from-report", str(REPORTS / "partial-three-lines.txt")])
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    for wrong in ("missing", "not installed", "None", "no nvcc found", "no NVIDIA GPU"):
        assert wrong not in out, wrong
    assert "ninja ?" in out and "flash-attn ?" in out and "? CPUs" in out and "nvcc ?" in out


def test_stated_absence_still_reads_as_absent() -> None:
    lines = area_lines(run_check(from_report=REPORTS / "torch-not-importable.txt").facts)
    assert lines["torch"] == "not installed"
    lines = area_lines(run_check(from_report=REPORTS / "torch2.1-cpu-build-on-gpu.txt").facts)
    assert "CPU build" in lines["torch"]


def test_probed_facts_keep_absent_wording() -> None:
    facts = {"python.version": "3.12.3", "ninja.version": None, "torch.version": None, "flash_attn.version": None}
    lines = area_lines(facts)
    assert "ninja missing" in lines["Python"]
    assert lines["torch"] == "not installed"
    assert "flash-attn not installed" in lines["Kernels"]


def test_json_lists_unknown_keys_and_leaves_them_out_of_facts(tmp_path: Path) -> None:
    res = runner.invoke(app, ["check", "--json", "--from-report", str(REPORTS / "partial-three-lines.txt")])
    data = json.loads(res.stdout)
    assert {"ninja.version", "gpu.count", "cpu.count", "python.version"} <= set(data["unknown"])
    assert not set(data["unknown"]) & set(data["facts"])
    assert data["facts"]["torch.version"] == "2.7.1+cu126"
    # read back, the unknown stay unknown
    saved = tmp_path / "check.json"
    saved.write_text(res.stdout)
    again = json.loads(runner.invoke(app, ["check", "--json", "--from-report", str(saved)]).stdout)
    assert again["unknown"] == data["unknown"]


def test_missing_is_unknown_for_what_a_report_did_not_state() -> None:
    assert truth("missing(ninja.path)", {"facts.partial": True}) is None
    assert truth("known(ninja.path)", {"facts.partial": True}) is False
    assert truth("default(ninja.path, 'x') == 'x'", {"facts.partial": True}) is True
    assert truth("missing(ninja.path)", {"facts.partial": True, "ninja.path": None}) is True
    assert truth("missing(ninja.path)", {}) is True  # probed facts: not there means absent


def test_cpu_build_rule_needs_the_report_to_say_so(tmp_path: Path) -> None:
    stated = run_check(from_report=REPORTS / "torch2.1-cpu-build-on-gpu.txt")
    assert "OD155" in [f.code for f in stated.errors]
    # the "CUDA used to build PyTorch" line cut out: the wheel's +cpu tag still says so
    text = (REPORTS / "torch2.1-cpu-build-on-gpu.txt").read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(ln for ln in text.splitlines() if not ln.startswith("CUDA used to build")))
    assert "OD155" in [f.code for f in run_check(from_report=cut).errors]
    # and without the tag too, torch's CUDA is unknown, not absent: the rule stays quiet
    cut.write_text(cut.read_text().replace("2.1.2+cpu", "2.1.2"))
    assert "OD155" not in [f.code for f in run_check(from_report=cut).findings]


def test_healthy_reports_have_no_error() -> None:
    for name in ("torch2.7-gh200-aarch64.txt", "paste-numbered-gutter.txt", "partial-three-lines.txt"):
        assert not run_check(from_report=REPORTS / name).errors, name
    # a 2.6 nightly comes before 2.6.0 (PEP 440): below the trainer's torch>=2.6, whatever else is right
    for name in ("torch2.6-nightly-h100x8.txt", "paste-details-fenced.txt"):
        assert [f.code for f in run_check(from_report=REPORTS / name).errors] == ["OD208"], name


def test_areas_a_report_does_not_cover_are_marked_unknown_not_fine() -> None:
    res = runner.invoke(app, ["check", "--from-report", str(REPORTS / "partial-three-lines.txt")])
    rows = {line.split()[1]: line.split()[0] for line in res.stdout.splitlines() if line.startswith(" ") and
            len(line.split()) > 1 and line.split()[1] in ("GPU", "CUDA", "Machine", "torch")}
    # the toolkit is not stated: its checks could not run, and the check says which toolkit to look at (OD119)
    assert rows == {"GPU": "?", "CUDA": "!", "Machine": "?", "torch": "✓"}
    out = " ".join(res.stdout.split())
    assert "OD119" in out and "could not judge" in out
