"""What is a report, and where each fact came from: a text about no machine, this project's own documentation, its
own `check` output and a saved report of a format this release does not read are refused in one line (exit 2);
every fact of an accepted report names the line it was read from, in `--json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from olmo_doctor.api import run_check
from olmo_doctor.report import REPORT_FORMAT, REPORT_MARK, read_report
from tests.doctor.test_report_corpus import MISSES as CORPUS_MISSES
from tests.helpers import FIXTURES, ROOT, run_cli

# every report the reader must accept: the corpora's cases that must be refused (texts about no machine), and the
# reader's explained misses (a report it still refuses, listed with why), are judged by test_report_corpus.py
_REFUSED = {case["file"] for corpus in sorted((FIXTURES / "report_corpus").glob("cases*.toml"))
            for case in tomllib.loads(corpus.read_text())["case"] if case.get("refused")} | set(CORPUS_MISSES)
REPORTS = sorted((FIXTURES / "reports").glob("*.txt")) + sorted(
    p for p in (FIXTURES / "report_corpus").glob("*.txt") if p.name not in _REFUSED)
META = {"facts.partial", "facts.refused", "gpu.source", "plan.device"}


def _refused(path: Path, needle: str) -> None:
    res = run_cli("check", "--from-report", str(path))
    assert res.returncode == 2 and res.stdout == "", res.stdout
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert needle in res.stderr, res.stderr


def test_the_projects_own_readme_is_not_a_report() -> None:
    # its example output describes the machine the docs were written on (an H200), not the reader's
    _refused(ROOT / "README.md", "documents olmo-doctor")


def test_any_page_that_documents_this_tool_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "howto.md"
    page.write_text("# Training on a new box\n\nFirst `olmo-doctor check`, then `olmo-doctor build-kernels`;\n"
                    "`olmo-doctor fix --apply` repairs what it can, and `olmo train --smoke` tries a run.\n"
                    "On the reference box this showed torch 2.11.0+cu130 and driver 580.159.04.\n")
    _refused(page, "documents olmo-doctor")
    # a user's paste that names one command of this tool is still a report
    paste = tmp_path / "paste.txt"
    paste.write_text("I ran olmo-doctor check on my box: torch 2.7.1+cu126, driver 550.54.15, RTX 4090\n")
    facts, _ = read_report(paste)
    assert facts["torch.version"] == "2.7.1+cu126" and facts["driver.version"] == "550.54.15"


def test_this_tools_own_check_output_is_not_read_back(tmp_path: Path) -> None:
    out = tmp_path / "check.txt"
    out.write_text(run_cli("check", "--from-report", str(FIXTURES / "reports" / "torch2.7-gh200-aarch64.txt")).stdout)
    _refused(out, "olmo-doctor report -o FILE")
    # pasted below a report, its lines (area summaries, findings, the recommended environment) add nothing
    report = tmp_path / "report-and-check.txt"
    report.write_text("torch 2.7.1+cu126 on an RTX 4090\n\n" + out.read_text())
    facts, _ = read_report(report)
    assert facts["gpu.0.compute_capability"] == "8.9" and facts["gpu.count"] == 1
    assert "driver.version" not in facts and "python.version" not in facts


@pytest.mark.parametrize("text", [
    "my training is slow, please help\n",
    "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\n",  # a compiler alone says nothing of the GPU stack
    'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nKeyError: \'lr\'\n',
    "requires torch>=2.6 and CUDA 12.8 or newer\n",  # requirements, not this machine
])
def test_a_text_about_no_machine_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "x.txt"
    path.write_text(text)
    _refused(path, "not a report")


@pytest.mark.parametrize("declared", [99, 0, "1", True, [1], None])
def test_a_saved_report_of_an_unknown_format_is_refused(tmp_path: Path, declared: object) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({REPORT_MARK: declared, "facts": {"torch.version": "2.7.1+cu126"}}))
    _refused(path, "report format")


def test_a_saved_report_of_this_format_is_read(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({REPORT_MARK: REPORT_FORMAT, "facts": {"torch.version": "2.7.1+cu126"}}, indent=2))
    facts, sources = read_report(path)
    assert facts["torch.version"] == "2.7.1+cu126"
    assert '"torch.version"' in sources["torch.version"].text  # its line in the JSON


@pytest.mark.parametrize("path", REPORTS, ids=[p.name for p in REPORTS])
def test_every_fact_names_the_line_it_came_from(path: Path) -> None:
    result = run_check(from_report=path)
    sources = result.extra["sources"]
    assert isinstance(sources, dict)
    for key in result.facts:
        if key in META:
            continue
        assert key in sources, f"{key} = {result.facts[key]!r} has no source"
        src = sources[key]
        assert src["line"] >= 1 and src["text"], (key, src)


def test_json_shows_sources_and_what_could_not_be_judged(tmp_path: Path) -> None:
    path = tmp_path / "r.txt"
    path.write_text("Hi! My setup:\n- PyTorch: 2.7.1+cu126\n- GPU: RTX 4090\n")
    data = json.loads(run_cli("check", "--json", "--from-report", str(path)).stdout)
    assert data["sources"]["torch.version"] == {"line": 2, "text": "- PyTorch: 2.7.1+cu126"}
    # derived facts say what they follow from
    assert data["sources"]["torch.cuda"]["via"] == "torch.version"
    assert data["sources"]["gpu.0.compute_capability"]["via"] == "gpu.0.name"
    assert "OD110" in data["not_judged"]["nvcc.version"] and "OD165" in data["not_judged"]["glibc.version"]
    text = run_cli("check", "--from-report", str(path)).stdout
    assert "could not judge: " in " ".join(text.split()) and "nvcc (not stated)" in " ".join(text.split())
