"""The `check` family of commands through the real CLI: exit codes, JSON shape, scopes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli
from typer.testing import CliRunner

from olmo_doctor.cli import app
from tests.machines import H200_CAPTURE

runner = CliRunner()
FINDING_KEYS = {"code", "cause", "severity", "title", "message", "fixes"}


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_check_json_is_one_object_with_the_documented_shape() -> None:
    res = invoke("check", "--json")
    assert res.exit_code in (0, 1), res.output
    data = json.loads(res.stdout)
    assert set(data) == {"facts", "unknown", "findings", "env", "elapsed_s"}
    assert data["unknown"] == []  # a probed machine: every documented key was looked at
    assert isinstance(data["elapsed_s"], float)
    for key in ("gpu.count", "python.version", "cpu.count", "mem.total_gb", "glibc.version", "os.container"):
        assert key in data["facts"]
    for finding in data["findings"]:
        assert set(finding) >= FINDING_KEYS
        assert finding["severity"] in ("error", "warning", "info")
        for fix in finding["fixes"]:
            assert fix["applicability"] in ("safe", "unsafe", "manual")


def test_cpu_machine_install_scope_refuses_as_build_kernels_and_train_scope_wants_a_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo_doctor.probes import gpu

    monkeypatch.setattr(gpu, "driver_present", lambda: False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi
    install = json.loads(invoke("check", "--json", "--scope", "install").stdout)
    assert install["facts"]["gpu.count"] == 0
    # no GPU to build kernels for: the refusal build-kernels gives (tests/doctor/test_one_plan.py compares the two)
    assert "BK001" in {f["code"] for f in install["findings"] if f["severity"] == "error"}
    assert any(f["code"] == "OD002" for f in install["findings"])
    res = invoke("check", "--json", "--scope", "train")
    assert res.exit_code == 1
    assert "OD001" in {f["code"] for f in json.loads(res.stdout)["findings"] if f["severity"] == "error"}
    cpu_plan = invoke("check", "--json", "--scope", "train", "--device", "cpu")
    assert "OD001" not in {f["code"] for f in json.loads(cpu_plan.stdout)["findings"]}


def test_from_report_h200_text_output() -> None:
    res = invoke("check", "--from-report", str(H200_CAPTURE / "collect_env.txt"))
    assert res.exit_code == 0, res.output
    assert "NVIDIA H200" in res.stdout and "TORCH_CUDA_ARCH_LIST=9.0" in res.stdout


def test_garbage_report_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.txt"
    bad.write_bytes(b"\x00\xff" * 1000)
    proc = run_cli("check", "--from-report", str(bad))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["check", "--scope", "nope"], ["env", "--format", "xml"], ["explain", "OD999"]])
def test_bad_usage_exits_2_with_one_line(args: list[str]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_env_formats_from_report() -> None:
    bash = invoke("env", "--from-report", str(H200_CAPTURE))
    assert "export TORCH_CUDA_ARCH_LIST=9.0" in bash.stdout and "export FLASH_ATTN_CUDA_ARCHS=90" in bash.stdout
    data = json.loads(invoke("env", "--format", "json", "--from-report", str(H200_CAPTURE)).stdout)
    assert data["MAX_JOBS"]["value"] == "16" and data["MAX_JOBS"]["reason"]
    fish = invoke("env", "--format", "fish", "--from-report", str(H200_CAPTURE)).stdout
    assert "set -gx NVCC_THREADS 1" in fish


def test_report_writes_atomically_and_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = invoke("report", "-o", str(out))
    assert res.exit_code == 0
    data = json.loads(out.read_text())
    assert data["olmo_doctor_report"] == 1 and "facts" in data
    assert not list(tmp_path.glob(".*tmp"))
    back = invoke("check", "--json", "--from-report", str(out))
    assert json.loads(back.stdout)["facts"]["python.version"] == data["facts"]["python.version"]


def test_report_to_dash_is_stdout_not_a_file_named_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o -` is stdout, as `--from-report -` is stdin (a red-team pass found a file named "-" written instead)."""
    monkeypatch.chdir(tmp_path)
    res = invoke("report", "-o", "-")
    assert res.exit_code == 0 and json.loads(res.stdout)["olmo_doctor_report"] == 1
    assert not (tmp_path / "-").exists() and list(tmp_path.iterdir()) == []


def test_rules_and_explain() -> None:
    listing = json.loads(invoke("rules", "--json").stdout)
    assert {"code", "cause", "severity", "sources"} <= set(listing[0])
    text = invoke("explain", listing[0]["code"]).stdout
    assert listing[0]["code"] in text and "Sources:" in text


def test_build_refusals_are_rules_that_explain_explains() -> None:
    codes = {r["code"] for r in json.loads(invoke("rules", "--json").stdout)}
    assert {"BK001", "BK002", "BK003", "BK008", "BK102", "BK103"} <= codes
    res = invoke("explain", "BK001")
    assert res.exit_code == 0, res.output
    assert "no-gpu-to-build-for" in res.stdout and "build-kernels" in res.stdout and "--arch" in res.stdout
    # no `when`: a build condition in olmo_doctor/checks/, judged wherever a build is planned
    assert "Fires when: as `build-kernels` or `check --scope install` plans a build" in res.stdout
    assert "olmo_doctor/checks/build.py, no_gpu" in res.stdout


def test_facts_keys_lists_the_vocabulary() -> None:
    out = invoke("facts", "--keys").stdout
    assert "gpu.N.compute_capability" in out and "ulimit.nofile.soft" in out
