"""Run the all-reduce worker under torchrun with a timeout and turn what happened into `nccl.*` facts.

Expected bandwidth per link (per direction): NVLink 3/4 carry 25 GB/s per link (A100: 12 links = 300 GB/s,
H100/H200: 18 links = 450 GB/s; NVIDIA A100/H100 datasheets), so `NV18` in `nvidia-smi topo -m` means 450 GB/s.
PCIe x16 carries ~31.5 GB/s (Gen4) or ~63 GB/s (Gen5) per direction. Measured all-reduce busbw reaches roughly
75% of that on a healthy box (2x H200 over NV18: 339-341 GB/s at 2 GiB with this probe's worker;
tests/fixtures/machines/h200x2-nccl-check.json is one such check).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from olmo_doctor.facts import Facts, FactValue
from olmo_doctor.isolation import child_env, python_argv
from olmo_doctor.run import Runner, run

NVLINK_GBPS_PER_LINK = 25.0
PCIE_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}


def _gpu0_to_gpu1(topo: str) -> str | None:
    """The GPU0 row's GPU1 cell of the topology matrix (NV12, PIX, SYS, ...)."""
    rows = [ln for ln in topo.splitlines() if ln.startswith("GPU0")]
    cells = rows[0].split() if rows else []
    return cells[2] if len(cells) > 2 else None


def link_between_gpus(runner: Runner = run) -> tuple[str | None, float | None]:
    """(link label, peak GB/s per direction) between GPU0 and GPU1 from `nvidia-smi topo -m`."""
    out = runner(["nvidia-smi", "topo", "-m"])
    if not out.ok:
        return None, None
    label = _gpu0_to_gpu1(out.stdout)
    if label and (m := re.match(r"NV(\d+)$", label)):
        return label, int(m.group(1)) * NVLINK_GBPS_PER_LINK
    gen = runner(["nvidia-smi", "--query-gpu=pcie.link.gen.max,pcie.link.width.max", "--format=csv,noheader"])
    m = re.match(r"\s*(\d+),\s*(\d+)", gen.stdout) if gen.ok else None
    if m and int(m.group(1)) in PCIE_GBPS:
        return label, PCIE_GBPS[int(m.group(1))] * int(m.group(2)) / 16
    return label, None


def _kill_all(pid: int) -> None:
    """End torchrun and every rank it started. torchrun starts each rank in a session of its own, so ending its
    group would leave a stuck rank alive, holding the output pipes open (and this process waiting on them): the
    group is stopped first, so no new rank appears while the tree is listed, then every process in it is killed."""
    import psutil

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGSTOP)
    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for child in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def run_allreduce(nproc: int, backend: str = "nccl", timeout: float = 180.0,
                  sizes_mb: str = "8,64,2048", env: Mapping[str, str] | None = None) -> Facts:
    # -P (-I before 3.11) and PYTHONSAFEPATH=1 for the ranks torchrun starts: no module from the working folder
    argv = python_argv(sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                       "-m", "olmo_doctor.nccl.worker", "--backend", backend, "--sizes-mb", sizes_mb, user_paths=True)
    facts: Facts = {"nccl.ran": True, "nccl.world": nproc, "nccl.hang": False, "nccl.error": None}
    # its own session, so a hang can be ended with every rank torchrun started, not just torchrun itself
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            env=child_env(user_paths=True, base=env), stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_all(proc.pid)
        stdout, stderr = proc.communicate()
        facts["nccl.hang"] = True
        facts["nccl.log"] = stdout + stderr
        return facts
    log = stdout + stderr
    facts["nccl.log"] = log
    line = next((ln for ln in stdout.splitlines() if ln.startswith("OLMO_DOCTOR_NCCL ")), None)
    if proc.returncode != 0 or line is None:
        facts["nccl.error"] = _last_error(log, proc.returncode)
        return facts
    facts.update(_measured(json.loads(line.split(" ", 1)[1])))
    return facts


def _last_error(log: str, returncode: int) -> str:
    """The last line of the log that reads like an error or warning, else the exit code."""
    errors = [ln.strip() for ln in log.splitlines() if re.search(r"error|warn|failed", ln, re.I)]
    return (errors[-1] if errors else f"torchrun exited with {returncode}")[:300]


def _measured(data: dict[str, Any]) -> Facts:
    """The worker's results: bus bandwidth at the largest size, and whether every sum was right."""
    results = data["results"]
    best = max(results, key=lambda r: r["size_mb"])
    return {"nccl.version": data.get("nccl"), "nccl.busbw_gbps": best["busbw_gbps"],
            "nccl.size_mb": best["size_mb"], "nccl.correct": all(r["correct"] for r in results),
            "nccl.results": [json.dumps(r) for r in results]}


def probe(facts: Mapping[str, FactValue], timeout: float = 180.0) -> Facts:
    count = facts.get("gpu.count")
    if not isinstance(count, int) or count < 2:
        return {"nccl.ran": False, "nccl.skipped": "needs at least 2 visible GPUs"}
    out = run_allreduce(count, timeout=timeout)
    label, peak = link_between_gpus()
    out["nccl.link"], out["nccl.link_peak_gbps"] = label, peak
    if peak and isinstance(out.get("nccl.busbw_gbps"), (int, float)):
        out["nccl.efficiency"] = round(float(out["nccl.busbw_gbps"]) / peak, 3)  # type: ignore[arg-type]
    return out
