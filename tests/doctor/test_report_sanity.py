"""Impossible values in a report are refused with one line naming the value (exit 2), never judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from olmo_doctor.errors import UsageError
from olmo_doctor.report import load_report
from tests.helpers import FIXTURES, ROOT

BASE = (FIXTURES / "reports" / "torch2.0-v100-lscpu.txt").read_text()


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("CPU(s):                          40", "CPU(s):                          -3", "cpu.count"),
        ("CPU(s):                          40", "CPU(s):                          0", "cpu.count"),
        ("PyTorch version: 2.0.1+cu118", "PyTorch version: 99.0.1", "torch.version"),
        ("Python version: 3.10.12", "Python version: 31.0.1", "python.version"),
        ("Nvidia driver version: 530.30.02", "Nvidia driver version: 5.30.02", "driver.version"),
        ("CUDA used to build PyTorch: 11.8", "CUDA used to build PyTorch: 118.0", "torch.cuda"),
        ("Libc version: glibc-2.28", "Libc version: glibc-9.28", "glibc.version"),
    ],
)
def test_impossible_collect_env_value_is_refused(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert old in BASE
    path = tmp_path / "collect_env.txt"
    path.write_text(BASE.replace(old, new))
    with pytest.raises(UsageError) as err:
        load_report(path)
    message = str(err.value)
    assert "\n" not in message and key in message and str(path) in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cpu.count", -3), ("cpu.count", "lots"), ("cpu.count", 2.5), ("mem.total_gb", 0), ("mem.total_gb", -64.0),
        ("gpu.count", 100000), ("gpu.0.compute_capability", "42.0"), ("gpu.0.compute_capability", "nine"),
        ("gpu.0.memory_gb", -80), ("disk.free_gb", -1), ("ulimit.nofile.soft", -5), ("torch.version", "banana"),
        ("python.version", 3.12), ("driver.version", "0.1"), ("mem.available_gb", float("nan")),
        ("cpu.count", True), ("torch.arch_list", {"sm_90": 1}),
    ],
)
def test_impossible_saved_report_value_is_refused(tmp_path: Path, key: str, value: object) -> None:
    facts = {"gpu.count": 1, "gpu.0.name": "NVIDIA H100 80GB HBM3", "torch.version": "2.5.1+cu124",
             "python.version": "3.11.9", "cpu.count": 32, "mem.total_gb": 256.0, key: value}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"olmo_doctor_report": 1, "facts": facts}))
    with pytest.raises(UsageError) as err:
        load_report(path)
    assert "\n" not in str(err.value) and key in str(err.value)


def test_plausible_edges_are_accepted(tmp_path: Path) -> None:
    facts = {"cpu.count": 1, "gpu.count": 0, "mem.available_gb": 0.0, "mem.total_gb": 0.5, "ulimit.nofile.soft": -1,
             "python.version": "2.7.18", "torch.version": "0.4.1", "driver.version": "390.77",
             "disk.free_gb": 0.0, "gpu.0.compute_capability": "12.1"}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"olmo_doctor_report": 1, "facts": facts}))
    assert load_report(path)["cpu.count"] == 1


def test_cli_refuses_with_exit_2_and_one_line(tmp_path: Path) -> None:
    path = tmp_path / "collect_env.txt"
    path.write_text(BASE.replace("CPU(s):                          40", "CPU(s):                          -3"))
    proc = subprocess.run([sys.executable, "-m", "olmo_doctor", "check", "--from-report", str(path)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "cpu.count" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_version_with_shell_syntax_is_refused(tmp_path: Path) -> None:
    facts = {"torch.version": "2.5.1+cu124", "driver.version": "535.104.05; touch /tmp/pwned", "cpu.count": 8}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"olmo_doctor_report": 1, "facts": facts}))
    with pytest.raises(UsageError, match=r"driver\.version"):
        load_report(path)


@pytest.mark.parametrize("content", ["{" * 100_000, "[" * 100_000, '{"facts": ' * 50_000])
def test_deeply_nested_json_is_refused_cleanly(tmp_path: Path, content: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(content)
    with pytest.raises(UsageError):
        load_report(path)


def test_oversized_and_endless_inputs_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.write(BASE.encode() * (17 * 1024 * 1024 // len(BASE) + 1))
    with pytest.raises(UsageError, match="larger than 16 MiB, the most a report can be"):
        load_report(big)  # refused from its size, before a byte is read
    with pytest.raises(UsageError, match="character device, not a regular file"):
        load_report("/dev/zero")  # a device never ends: refused before reading


def test_report_from_stdin() -> None:
    proc = subprocess.run([sys.executable, "-m", "olmo_doctor", "check", "--json", "--from-report", "-"],
                          input=BASE, capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["facts"]["gpu.1.name"] == "Tesla V100-SXM2-32GB"
