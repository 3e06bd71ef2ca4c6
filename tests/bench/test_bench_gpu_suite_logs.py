"""bench/gpu_suite.sh levers archives and drops only the logs its own run wrote: an earlier run's FA3 build log in
the output folder (./bench-out is reused between runs off the device) stays when this run built nothing. Run with
stand-in `python3` and `nvidia-smi` on PATH, so no GPU, pip or build is involved."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_levers_keeps_an_earlier_runs_build_log(tmp_path: Path) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("python3", "nvidia-smi"):  # every call succeeds and prints nothing: FA3 "imports", so no build
        (stubs / name).write_text("#!/bin/sh\nexit 0\n")
        (stubs / name).chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    (out / "fa3.log").write_text("an earlier run's build log\n")
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "OUT": str(out), "LEVERS_LIMIT": "60"}
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", "levers"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (out / "fa3.log").read_text() == "an earlier run's build log\n"
    assert (out / "levers_logs.tgz").is_file() and not (out / "install.log").exists()  # this run's own: archived
