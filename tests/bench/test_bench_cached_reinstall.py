"""bench/cached_reinstall.py runs end to end on a machine without a GPU dressed as an H200 (an nvidia-smi that
names one, a CUDA toolkit's nvcc, a stand-in CUDA torch): it plans the real build, stores a stand-in wheel under
the plan's real cache key, times plain pip against `build-kernels`' cached reinstall in the same run, and reports
that every reinstall came from the cache and no torch worker ran. Without the disguise it says the machine cannot
plan a build (exit 2), never a false pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, stand_in_torch

SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=name,compute_cap*) echo "NVIDIA H200, 9.0, 143771, 00000000:18:00.0, 580.159.04" ;;
  *--query-gpu=name,memory*) echo "NVIDIA H200, 143771, 00000000:18:00.0, 580.159.04" ;;
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-0)" ;;
  *) exit 0 ;;
esac
"""
NVCC = """#!/bin/sh
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 13.0, V13.0.88"
"""
TORCH = stand_in_torch("13.0", ("sm_90",), available=True, devices=1)


def _h200(tmp_path: Path) -> dict[str, str]:
    for folder in ("bin", "cuda/bin", "cuda/include/crt", "standin/torch"):
        (tmp_path / folder).mkdir(parents=True)
    for path, text in ((tmp_path / "bin" / "nvidia-smi", SMI), (tmp_path / "cuda" / "bin" / "nvcc", NVCC)):
        path.write_text(text)
        path.chmod(0o755)
    (tmp_path / "cuda" / "include" / "crt" / "host_config.h").write_text("#if __GNUC__ > 15\n")
    (tmp_path / "cuda" / "include" / "cuda_runtime.h").write_text("")
    (tmp_path / "standin" / "torch" / "__init__.py").write_text(TORCH)
    (tmp_path / "standin" / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    return {"PATH": f"{tmp_path / 'bin'}:{tmp_path / 'cuda' / 'bin'}:{os.environ.get('PATH', '')}",
            "CUDA_HOME": str(tmp_path / "cuda"), "PYTHONPATH": str(tmp_path / "standin")}


def _bench(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "result.json"
    return subprocess.run([sys.executable, str(ROOT / "bench" / "cached_reinstall.py"), "--size-mb", "4",
                           "--py-files", "5", "--repeats", "2", "--json", str(out)],
                          capture_output=True, text=True, env={**os.environ, "TMPDIR": str(tmp_path), **env},
                          timeout=600)


@pytest.mark.slow
def test_the_bench_times_a_cached_reinstall_against_plain_pip(tmp_path: Path) -> None:
    proc = _bench(tmp_path, _h200(tmp_path))
    # the seconds target is the bench's verdict on the GPU machine, not this test's (no wall-clock thresholds here)
    failed = [line for line in proc.stdout.splitlines() if line.strip().startswith("FAIL")]
    assert proc.returncode in (0, 1) and all("median <= 5 s" in line for line in failed), proc.stdout + proc.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["statuses"] == ["cached", "cached"] and result["worker_answers_added"] == 0
    assert len(result["anchor_pip_s"]) == 2 and result["ratio"] > 0
    assert "PASS  no torch worker ran" in proc.stdout
    assert not list(tmp_path.glob("olmo-bench-reinstall-*"))  # the throwaway venv and cache are gone


@pytest.mark.slow
def test_a_machine_that_cannot_plan_a_build_is_said_not_passed(tmp_path: Path) -> None:
    env = _h200(tmp_path)
    (tmp_path / "standin" / "torch" / "version.py").write_text("__version__ = '2.11.0+cpu'\ncuda = None\n")
    proc = _bench(tmp_path, env)  # a CPU torch: build-kernels refuses (BK008), on any machine
    assert proc.returncode == 2 and "refuses this machine" in proc.stderr and "BK008" in proc.stderr, \
        proc.stdout + proc.stderr
