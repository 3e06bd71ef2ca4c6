"""Container limits from cgroups (v2 and v1): the memory and CPU a build may really use.

psutil and os.cpu_count() read the host's /proc, so inside Docker, Kubernetes or Slurm they overstate what a
build can use; flash-attn's own MAX_JOBS guess makes exactly that mistake (its setup.py sizes jobs from
os.cpu_count() and psutil.virtual_memory(), which see the host, not the cgroup).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 60  # v1 reports "no limit" as a huge number near 2**63


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _own_paths(controller: str, root: Path) -> list[Path]:
    """Candidate cgroup dirs of this process for a controller (v2 unified, then v1), most specific first."""
    paths: list[Path] = []
    text = _read(Path("/proc/self/cgroup")) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # v2
            paths.append(root / rel)
        elif controller in controllers.split(","):
            base = root / controllers.split(",")[0]
            paths += [base / rel, base]
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
                stat = _read(d / "memory.stat") or ""
                inactive = 0
                for line in stat.splitlines():
                    key, _, num = line.partition(" ")
                    if key in ("inactive_file", "total_inactive_file") and num.isdigit():
                        inactive = int(num)
                return max(0, int(value) - inactive)
    return None


def cpu_quota(root: Path = ROOT) -> float | None:
    """CPUs allowed by the CFS quota (e.g. 2.5), or None when unlimited."""
    for d in _own_paths("cpu", root):
        text = _read(d / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
                return int(quota) / int(period)
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
