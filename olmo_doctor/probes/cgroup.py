"""Container limits from cgroups (v2 and v1): the memory and CPU a build may really use.

psutil and os.cpu_count() read the host's /proc, so inside Docker, Kubernetes or Slurm they overstate what a
build can use; flash-attn's own MAX_JOBS guess makes exactly that mistake (its setup.py sizes jobs from
os.cpu_count() and psutil.virtual_memory(), which see the host, not the cgroup).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from olmo_common.bounded.files import read_text

ROOT = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge number near 2**63


def _read(path: Path) -> str | None:
    try:
        return read_text(path, "system file", errors="replace").strip()
    except OSError:
        return None


def _line_paths(controllers: str, rel: str, controller: str, root: Path) -> list[Path]:
    """The folders one /proc/self/cgroup line names for a controller: v2's unified one, or v1's controller's."""
    if controllers == "":  # v2
        return [root / rel]
    if controller in controllers.split(","):
        base = root / controllers.split(",")[0]
        return [base / rel, base]
    return []


def _own_paths(controller: str, root: Path) -> list[Path]:
    """Candidate cgroup dirs of this process for a controller (v2 unified, then v1), most specific first."""
    paths: list[Path] = []
    text = _read(Path("/proc/self/cgroup")) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths += _line_paths(parts[1], parts[2].lstrip("/"), controller, root)
    paths += [root, root / controller]
    return [p for p in dict.fromkeys(paths) if p.is_dir()]


def memory_limit_bytes(root: Path = ROOT) -> int | None:
    for d in _own_paths("memory", root):
        for name in ("memory.max", "memory.limit_in_bytes"):
            value = _read(d / name)
            if value and value != "max" and value.isdigit() and int(value) < UNLIMITED:
                return int(value)
    return None


def memory_used_bytes(root: Path = ROOT) -> int | None:
    """Usage charged to the cgroup minus reclaimable page cache (inactive_file)."""
    for d in _own_paths("memory", root):
        for name in ("memory.current", "memory.usage_in_bytes"):
            value = _read(d / name)
            if value and value.isdigit():
                return max(0, int(value) - _inactive_file(d))
    return None


def _inactive_file(d: Path) -> int:
    """memory.stat's reclaimable page cache (inactive_file; total_inactive_file on cgroup v1), 0 when absent."""
    inactive = 0
    for line in (_read(d / "memory.stat") or "").splitlines():
        key, _, num = line.partition(" ")
        if key in ("inactive_file", "total_inactive_file") and num.isdigit():
            inactive = int(num)
    return inactive


def cpu_quota(root: Path = ROOT) -> float | None:
    """CPUs allowed by the CFS quota (e.g. 2.5), or None when unlimited."""
    for d in _own_paths("cpu", root):
        quota = _v2_quota(d)
        if quota is None:
            quota = _v1_quota(d)
        if quota is not None:
            return quota
    return None


def _v2_quota(d: Path) -> float | None:
    """cgroup v2's `cpu.max` ("quota period", or "max period" when unlimited)."""
    quota, _, period = (_read(d / "cpu.max") or "").partition(" ")
    if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
        return int(quota) / int(period)
    return None


def _v1_quota(d: Path) -> float | None:
    """cgroup v1's cpu.cfs_quota_us over cpu.cfs_period_us (a quota of -1: unlimited)."""
    q, p = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    if q and p and q.lstrip("-").isdigit() and p.isdigit() and int(q) > 0 and int(p) > 0:
        return int(q) / int(p)
    return None


def usable_cpus(root: Path = ROOT) -> int:
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count() or 1
    quota = cpu_quota(root)
    return max(1, min(affinity, math.ceil(quota))) if quota else affinity
