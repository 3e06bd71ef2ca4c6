"""Severity follows the plan (a build problem is an error only where a build is planned) and findings that share
a root cause are shown as one finding with its consequences beneath it, in text and in JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from olmo_doctor.api import run_check
from olmo_doctor.commands.check_text import print_result
from olmo_doctor.facts import Facts
from olmo_doctor.render import to_json
from olmo_doctor.report import load_report
from olmo_doctor.rules.engine import run_rules
from olmo_doctor.rules.model import load_rules
from tests.machines import H200_CAPTURE


def _h200() -> Facts:
    return load_report(H200_CAPTURE)


def _no_nvcc() -> Facts:
    # stated absent (None), not left out: a report's unstated key is unknown and keeps the rules quiet
    facts = {k: (None if k.startswith(("nvcc.", "cuda.home")) else v) for k, v in _h200().items()}
    return {**facts, "nvcc.path": None, "nvcc.version": None, "flash_attn.import_ok": None}


def test_missing_nvcc_is_a_warning_unless_a_build_is_planned() -> None:
    facts = _no_nvcc()
    plain = {f.code: f for f in run_rules(facts, scope="all")}
    assert plain["OD113"].severity == "warning" and "SDPA" in plain["OD113"].title
    assert not [f for f in plain.values() if f.severity == "error"]
    assert "OD113" not in {f.code for f in run_rules(facts, scope="train")}
    planned = {f.code: f for f in run_rules(facts, scope="install")}
    assert planned["OD113"].severity == "error"


def test_plain_check_of_a_healthy_box_without_nvcc_exits_0() -> None:
    result = run_check(scope="all", facts=_no_nvcc())
    assert not result.has_errors


def test_every_unplanned_severity_is_milder_and_only_on_build_rules() -> None:
    order = {"error": 0, "warning": 1, "info": 2}
    for rule in load_rules():
        if rule.unplanned_severity is not None:
            assert "install" in rule.scopes, rule.code
            assert order[rule.unplanned_severity] > order[rule.severity], rule.code


def _stale_nvcc() -> Facts:
    return {**_h200(), "nvcc.version": "11.0", "nvcc.full_version": "11.0.221", "nvcc.path": "/opt/old/bin/nvcc",
            "nvcc.on_path": "/opt/old/bin/nvcc", "nvcc.max_gcc": None}


def test_stale_nvcc_is_one_error_with_its_consequences() -> None:
    findings = run_rules(_stale_nvcc(), scope="install")
    roots = [f for f in findings if not f.root]
    assert [f.code for f in roots] == ["OD110"]
    assert len(findings) >= 4 and all(f.root == "OD110" for f in findings if f.code != "OD110")


def test_consequences_nest_in_json_and_text() -> None:
    result = run_check(scope="install", facts=_stale_nvcc())
    data = json.loads(json.dumps(to_json(result), default=str))
    assert [f["code"] for f in data["findings"]] == ["OD110"]
    nested = data["findings"][0]["consequences"]
    assert {c["code"] for c in nested} >= {"OD120", "OD130"} and all(c["root"] == "OD110" for c in nested)
    out = io.StringIO()
    print_result(result, console=Console(file=out, width=200, no_color=True, highlight=False))
    text = out.getvalue()
    assert "✗ 1 problem(s) must be fixed" in text
    assert "↳" in text and "follows from OD110" in text
    assert text.count("why:") == 1  # one full block, the rest one line each


def test_consequence_links_name_existing_rules() -> None:
    codes = {r.code for r in load_rules()}
    for rule in load_rules():
        assert set(rule.consequence_of) <= codes - {rule.code}, rule.code


def test_h200_report_still_has_no_finding_above_info() -> None:
    findings = run_rules(_h200(), scope="all")
    assert not [f for f in findings if f.severity in ("error", "warning")], [f.code for f in findings]


def _report(tmp_path: Path, **swap: str) -> Path:
    """The H200 collect_env report with some lines swapped (GPU, driver, Python)."""
    text = (H200_CAPTURE / "collect_env.txt").read_text()
    for old, new in swap.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "collect_env.txt"
    path.write_text(text)
    return path


def test_report_with_an_old_gpu_is_not_ready(tmp_path: Path) -> None:
    path = _report(tmp_path, **{"GPU 0: NVIDIA H200": "GPU 0: GeForce GTX 780"})
    result = run_check(from_report=path)
    assert result.facts["gpu.0.compute_capability"] == "3.5"
    assert "OD147" in {f.code for f in result.errors}


def test_report_with_an_unknown_gpu_warns(tmp_path: Path) -> None:
    path = _report(tmp_path, **{"GPU 0: NVIDIA H200": "GPU 0: NVIDIA Quantum Widget 9000"})
    result = run_check(from_report=path)
    assert result.facts.get("gpu.0.compute_capability") is None
    warning = next(f for f in result.findings if f.code == "OD003")
    assert warning.severity == "warning" and "compute_cap" in warning.message


def test_report_with_a_driver_no_current_torch_runs_on(tmp_path: Path) -> None:
    path = _report(tmp_path, **{"Nvidia driver version: 580.159.04": "Nvidia driver version: 470.57.02"})
    result = run_check(from_report=path)
    roots = [f.code for f in result.errors if not f.root]
    assert roots == ["OD105"] and any(f.root == "OD105" for f in result.findings)


def test_report_with_a_python_newer_than_any_torch(tmp_path: Path) -> None:
    path = _report(tmp_path, **{"Python version: 3.12.3": "Python version: 3.16.0"})
    assert "OD181" in {f.code for f in run_check(from_report=path).errors}
