"""Refuse a report that states what no machine can be: -3 CPUs, 0 GB of RAM, compute capability 42.0, torch 99,
a CPU count that is a word. Such a report was edited or mangled, and judging it would give confident advice about
a machine that does not exist, so `check` stops with one line naming the value (exit 2) instead of guessing
which of its other facts still hold.
"""

from __future__ import annotations

import math
import re

from olmo_doctor.compat.versions import parse_version
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, FactValue, documented_key

# key -> (lowest, highest) plausible value; generous, so only the impossible is refused.
NUMBERS: dict[str, tuple[float, float]] = {
    "cpu.count": (1, 65536), "cpu.physical_count": (1, 65536), "gpu.count": (0, 256),
    "mem.total_gb": (0.01, 100_000), "mem.available_gb": (0, 100_000), "mem.cgroup_limit_gb": (0.01, 100_000),
    "gpu.N.memory_gb": (0.01, 10_000), "shm.size_gb": (0, 10_000_000), "disk.free_gb": (0, 10_000_000),
    "disk.free_gb.venv": (0, 10_000_000), "disk.free_gb.pip_cache": (0, 10_000_000),
    "disk.free_gb.tmp": (0, 10_000_000), "plan.data_workers": (0, 65536),
}
INTEGERS = {"cpu.count", "cpu.physical_count", "gpu.count", "plan.data_workers", "ulimit.nofile.soft",
            "ulimit.nofile.hard", "ulimit.memlock.soft", "ulimit.memlock.hard"}
# key -> (lowest, highest) release major of a version that exists or plausibly will.
VERSION_MAJOR: dict[str, tuple[int, int]] = {
    "python.version": (2, 4), "torch.version": (0, 9), "torch.cuda": (1, 30), "nvcc.version": (1, 30),
    "nvcc.full_version": (1, 30), "driver.cuda_version": (1, 30), "driver.version": (100, 2000),
    "cuda.home_nvcc_version": (1, 30), "nvcc.on_path_version": (1, 30), "gcc.version": (2, 50),
    "glibc.version": (2, 2), "cudnn.version": (1, 30), "torch.cudnn": (1, 30), "torch.nccl": (1, 9),
    "nccl.version": (1, 9), "pip.version": (1, 999), "setuptools.version": (0, 9999), "ninja.version": (1, 99),
}


def _bad(key: str, value: FactValue, why: str) -> UsageError:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return UsageError(f"{key} = {shown} is impossible ({why}); correct or delete that value in the report")


def _compute_capability(key: str, value: FactValue) -> None:
    m = re.fullmatch(r"(\d{1,2})\.(\d)", str(value))
    if not m or not 1 <= int(m.group(1)) <= 20:
        raise _bad(key, value, "a compute capability is major.minor, 1.0 to 20.9")


def check(facts: Facts) -> None:
    """Raise UsageError (exit 2) on the first value no real machine could report."""
    for key, value in facts.items():
        if value is None:
            continue
        doc = documented_key(key)
        if doc in NUMBERS or key in INTEGERS:
            _number(key, doc, value)
        elif doc == "gpu.N.compute_capability":
            _compute_capability(key, value)
        elif doc in VERSION_MAJOR:
            _version(key, value)
    total, avail = facts.get("mem.total_gb"), facts.get("mem.available_gb")
    if isinstance(total, int | float) and isinstance(avail, int | float) and avail > total * 1.05 + 1:
        raise _bad("mem.available_gb", avail, f"more than the {total} GB total")


def _number(key: str, doc: str, value: FactValue) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(key, value, "not a number")
    if key in INTEGERS and value != int(value):
        raise _bad(key, value, "not a whole number")
    if key.startswith("ulimit."):
        _limit(key, value)
        return
    low, high = NUMBERS[doc]
    if not low <= value <= high:
        raise _bad(key, value, f"outside {low:g}..{high:g}")


def _limit(key: str, value: float) -> None:
    if value < -1:
        raise _bad(key, value, "a limit is -1 (unlimited) or a count")


def _version(key: str, value: FactValue) -> None:
    # one token of version characters: a version never holds spaces, quotes or shell syntax
    version = parse_version(value) if isinstance(value, str) and re.fullmatch(r"[vV]?\d[\w.+\-]*", value) else None
    if version is None:
        raise _bad(key, value, "not a version number")
    low, high = VERSION_MAJOR[key]
    if not low <= version.release[0] <= high:
        raise _bad(key, value, f"no release has major version {version.release[0]}")
