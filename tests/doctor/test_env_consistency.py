"""The environment's own consistency: unmet requirements read from installed metadata (a fake site-packages),
GPUs hidden by CUDA_VISIBLE_DEVICES, and a CC/CXX that names no compiler."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from olmo_doctor.checks import environment
from olmo_doctor.probes import compiler, env_vars
from olmo_doctor.probes.requirements import scan, unmet_requirements
from olmo_doctor.rules.engine import run_rules


def _dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "lib" / "python3.12" / "site-packages"
    _dist(site, "torch", "2.11.0+cu130", "setuptools>=77.0.3", "filelock", "sympy>=1.13.3; extra == 'opt'",
          "pywin32; sys_platform == 'win32'")
    _dist(site, "setuptools", "69.5.1")
    _dist(site, "filelock", "3.16.1")
    _dist(site, "olmo-doctor", "0.1.0", "ninja>=1.11", "torch>=2.4")
    _dist(site, "sphinx", "7.0.0", "docutils<0.21,>=0.18.1")
    _dist(site, "docutils", "0.21.2")
    return site


def test_scan_reports_exactly_the_unmet_requirements(site: Path) -> None:
    found = scan([str(site)])
    assert sorted(found) == sorted([
        "torch 2.11.0+cu130 requires setuptools>=77.0.3; has 69.5.1",
        "olmo-doctor 0.1.0 requires ninja>=1.11; missing",
        "sphinx 7.0.0 requires docutils<0.21,>=0.18.1; has 0.21.2",
    ])  # the extra and the win32-only requirement are left out; filelock and torch>=2.4 are met


def test_findings_are_graded_by_what_they_break(site: Path) -> None:
    findings = run_rules({"python.unmet_requirements": scan([str(site)])})
    by_code = {f.code: f for f in findings}
    assert by_code["OD206"].severity == "error" and by_code["OD207"].severity == "warning"
    fix = by_code["OD206"].fixes[0]
    assert fix.applicability == "safe" and fix.action == {"op": "pip_install", "requirement": "setuptools>=77.0.3"}
    assert "ninja>=1.11" in fix.commands[0] and "setuptools>=77.0.3" in fix.commands[0]
    assert by_code["OD207"].fixes[0].action == {"op": "pip_install", "requirement": "docutils<0.21,>=0.18.1"}
    assert "ninja" in by_code["OD206"].message and "not installed" in by_code["OD206"].message


def test_a_torch_requirement_is_never_a_safe_install() -> None:
    facts = {"python.unmet_requirements": ["xformers 0.0.33 requires torch==2.9.0; has 2.11.0+cu130"]}
    finding = next(f for f in run_rules(facts) if f.code == "OD207")
    assert finding.fixes[0].action == {"op": "pip_install", "requirement": "unknown"}  # blocked, not applied


def test_consistent_environment_is_quiet(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _dist(site, "torch", "2.11.0", "setuptools>=77.0.3")
    _dist(site, "setuptools", "80.9.0")
    assert scan([str(site)]) == []
    assert not [f for f in run_rules({"python.unmet_requirements": []}) if f.cause == "unmet_requirement"]


def test_cache_follows_the_site_packages(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = unmet_requirements([str(site)])
    assert any("ninja" in line for line in first)
    assert unmet_requirements([str(site)]) == first  # served from the cache
    os.utime(site, (1, 1))  # pin the old mtime, then install ninja: the folder changes
    _dist(site, "ninja", "1.13.0")
    assert not any("ninja" in line for line in unmet_requirements([str(site)]))


@pytest.mark.parametrize(("value", "count", "visible"), [
    ("", 1, 0), ("-1", 8, 0), ("NoDevFiles", 2, 0), ("0", 1, 1), ("0,1", 2, 2), ("1,5,0", 2, 1), ("2,3", 2, 0),
    ("GPU-6b3a8a4e", 1, 1), (" 0 , 1 ", 4, 2),
])
def test_visible_gpu_count(value: str, count: int, visible: int) -> None:
    assert environment.visible_gpu_count(value, count) == visible


def test_hidden_gpus_fact_and_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    facts = {**env_vars.probe(), "gpu.count": 1, "gpu.0.name": "NVIDIA H200", "gpu.0.compute_capability": "9.0"}
    assert facts["env.CUDA_VISIBLE_DEVICES"] == ""
    codes = [f.code for f in run_rules({**facts, "plan.device": "cuda"}, scope="train")]
    assert "OD004" in codes
    assert "OD004" not in [f.code for f in run_rules(facts, scope="install")]


def test_compiler_env_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_exec = tmp_path / "gcc-13"
    not_exec.write_text("")
    good = tmp_path / "g++-13"
    good.write_text("#!/bin/sh\n")
    good.chmod(0o755)
    monkeypatch.setenv("CC", "/usr/bin/gcc-99")
    monkeypatch.setenv("CXX", f"{good} -std=c++17")
    monkeypatch.setenv("CUDAHOSTCXX", str(not_exec))
    bad = compiler.env_missing()
    assert bad == ["CC=/usr/bin/gcc-99", f"CUDAHOSTCXX={not_exec}"]
    finding = next(f for f in run_rules({"gcc.env_missing": bad}) if f.code == "OD176")
    assert finding.severity == "error" and "/usr/bin/gcc-99" in finding.title
    monkeypatch.setenv("CC", "definitely-not-a-compiler-xyz")
    monkeypatch.delenv("CUDAHOSTCXX")
    assert compiler.env_missing() == ["CC=definitely-not-a-compiler-xyz"]
