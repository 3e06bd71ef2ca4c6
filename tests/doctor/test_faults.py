"""bench/faults.sh on this machine: each injected fault is judged right by `check`, with a warm cache (the torch
worker's answer cached on the machine without the fault) and a cold one. The fast test runs a few faults of each
kind that a CPU machine can hold (a resource limit, a cache folder, an interface variable, an allocator config,
a debugging switch, a thread count, a preload the loader refuses, and a variable that must stay quiet)
with a stand-in torch, so the cold runs cost no torch import; the slow test runs every fault with the real torch
(GPU-only faults print n/a here and run on the GPU machine)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, stand_in_torch

BASH = shutil.which("bash")
STAND_IN_TORCH = stand_in_torch()
FAST = ("CPU-time limit|TRITON_CACHE_DIR under a file|GLOO_SOCKET_IFNAME|PYTORCH_ALLOC_CONF|CUDA_LAUNCH_BLOCKING"
        "|OMP_NUM_THREADS=0|LD_PRELOAD names|NVIDIA_VISIBLE_DEVICES=none|garbage_collection_threshold")
FAST_COUNT = 9


def _faults(tmp_path: Path, only: str | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = [BASH or "bash", str(ROOT / "bench" / "faults.sh"), *(["--only", only] if only else [])]
    return subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable,
                                                                     "TMPDIR": str(tmp_path), **env}, timeout=1800)


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_cpu_faults_are_judged_right_with_warm_and_cold_caches(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(STAND_IN_TORCH)
    (site / "torch" / "version.py").write_text("__version__ = '2.11.0+cpu'\ncuda = None\n")
    proc = _faults(tmp_path, FAST, {"PYTHONPATH": str(site), "FAULT_JOBS": "2"})
    rows = [line for line in proc.stdout.splitlines() if line.rstrip().endswith(("PASS", "FAIL", "n/a"))]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(rows) == FAST_COUNT and all(r.rstrip().endswith("PASS") for r in rows), proc.stdout
    assert "faults failed: 0" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_every_fault_this_machine_can_hold(tmp_path: Path) -> None:
    proc = _faults(tmp_path, None, {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = [line for line in proc.stdout.splitlines() if line.rstrip().endswith("PASS")]
    assert len(passed) >= 10, proc.stdout
