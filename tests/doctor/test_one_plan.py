"""One plan: `check --scope install` names exactly the refusals `build-kernels --package all --dry-run` gives on the
same machine, BK codes included, on a set of machines (fixtures in tests/machines.py plus the broken ones
below, each replayed through both CLIs from one report) and on this machine, probed for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from tests.machines import CPU_ONLY, H200, MACHINES

runner = CliRunner()

MORE = {
    "cpu-only": CPU_ONLY,
    # a GPU machine with a CPU torch (BK008 and OD155), and one without nvcc (BK005)
    "h200-cpu-torch": {**H200, "torch.version": "2.11.0+cpu", "torch.cuda": None},
    "h200-no-nvcc": {**H200, "nvcc.version": None, "nvcc.path": None, "cuda.home": None},
    # an installed flash-attn built for another torch, and a damaged xformers: errors of the install scope that
    # building fixes, so they never refuse the build
    "h200-broken-kernels": {**H200, "flash_attn.version": "2.8.3", "flash_attn.import_ok": False,
                            "flash_attn.import_error": "ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c10x",
                            "xformers.version": "0.0.35", "xformers.import_ok": False,
                            "xformers.import_error": "OSError: /v/xformers/_C.so: file too short"},
    # a toolchain problem that must refuse: gcc newer than nvcc accepts
    "h200-gcc-too-new": {**H200, "gcc.version": "15.2.0", "nvcc.version": "12.8", "nvcc.max_gcc": 14},
    "old-torch": {**H200, "torch.version": "2.1.0+cu121", "torch.cuda": "12.1"},
}
ALL = {**MACHINES, **MORE}


def _report(tmp_path: Path, name: str, facts: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"olmo_doctor_report": 1, "facts": facts}))
    return path


def _check_errors(*args: str) -> set[str]:
    res = runner.invoke(app, ["check", "--scope", "install", "--json", *args])
    assert res.exit_code in (0, 1), res.output
    data = json.loads(res.stdout)
    flat = [*data["findings"], *(c for f in data["findings"] for c in f["consequences"])]
    return {f["code"] for f in flat if f["severity"] == "error"}


def _build_refusals(*args: str) -> tuple[set[str], set[str]]:
    """(codes that refuse a build, codes about installed kernels shown beside them) over both packages."""
    res = runner.invoke(app, ["build-kernels", "--package", "all", "--dry-run", "--json", *args])
    assert res.exit_code in (0, 1), res.output
    plans = json.loads(res.stdout)["plans"]
    assert [p["package"] for p in plans] == ["flash-attn", "xformers"]
    blockers = {b["code"] for p in plans for b in p["blockers"]}
    installed = {b["code"] for p in plans for b in p["installed_kernels"]}
    return blockers, installed


@pytest.mark.parametrize("name", sorted(ALL))
def test_check_install_and_build_kernels_give_the_same_codes(tmp_path: Path, name: str) -> None:
    report = str(_report(tmp_path, name, ALL[name]))
    checked = _check_errors("--from-report", report)
    blockers, installed = _build_refusals("--from-report", report)
    assert checked == blockers | installed, (name, checked, blockers, installed)
    assert not blockers & installed
    if name == "h200-broken-kernels":  # shown by both, refusing neither build
        assert {"OD160", "OD290"} <= installed and not blockers
    expected = {"cpu-only": {"BK001", "BK008"}, "h200-gcc-too-new": {"OD175"}, "old-torch": {"BK004"},
                "h200-no-nvcc": {"BK005"}, "h200-cpu-torch": {"BK008"}, "v100-cuda13": {"BK002"}}
    assert expected.get(name, set()) <= blockers


def test_the_cpu_machine_case_of_the_issue(tmp_path: Path) -> None:
    """Where build-kernels --dry-run refuses with BK001 and BK008, check --scope install no longer says
    "No blocking problems"."""
    report = str(_report(tmp_path, "cpu", CPU_ONLY))
    res = runner.invoke(app, ["check", "--scope", "install", "--from-report", report])
    assert res.exit_code == 1 and "No blocking problems" not in res.stdout
    assert "BK001" in res.stdout and "BK008" in res.stdout


def test_this_machine_probed_gives_one_answer() -> None:
    # the session's isolated cache (tests/conftest.py): the torch worker's answer is probed for real once per session
    checked = _check_errors()
    blockers, installed = _build_refusals()
    assert checked == blockers | installed
