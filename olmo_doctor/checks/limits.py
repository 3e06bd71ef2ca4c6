"""Conditions on resource limits (`ulimit`) that stop a training run or a kernel build.

A limit is a fact `ulimit.<name>.soft` in bytes, seconds or a count, -1 when unlimited.
"""

from __future__ import annotations

from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue, gpu_indices

GIB = 1 << 30
# The CUDA driver reserves host virtual address space for unified addressing when a context starts: measured at
# about twice the installed device memory (NVIDIA/cuda-python PR #2458), plus what torch and its libraries map.
VA_PER_GPU_GB_FACTOR = 2.0
VA_BASE_GIB = 64
# A file-size limit below this breaks checkpoints, shards and wheels (a 7B model's checkpoint with its optimizer
# state is ~100 GB; a flash-attn build writes files of hundreds of MB).
FSIZE_FLOOR = 1 << 40
# Threads a training process starts per CPU (OpenMP, the DataLoader, NCCL and CUDA helpers), with room for the
# user's other processes: below this the first thread pool fails ("Thread creation failed").
NPROC_PER_CPU = 8
NPROC_FLOOR = 512


def _limit(facts: Mapping[str, FactValue], name: str) -> int | None:
    """A finite soft limit, or None (unlimited or unknown)."""
    value = facts.get(f"ulimit.{name}.soft")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _human(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


def _plans_gpu(facts: Mapping[str, FactValue]) -> bool:
    count = facts.get("gpu.count")
    return facts.get("plan.device") != "cpu" and isinstance(count, int) and count > 0


def _address_space_needed(facts: Mapping[str, FactValue]) -> int:
    memory = sum(float(m) for i in gpu_indices(facts)
                 if isinstance(m := facts.get(f"gpu.{i}.memory_gb"), (int, float)) and not isinstance(m, bool))
    return int((VA_BASE_GIB + VA_PER_GPU_GB_FACTOR * memory) * GIB)


# Where a memory failure of this process can be seen, and what it stopped: the error of a run the `olmo` error
# path asks about, what the torch worker saw (torch's import, CUDA's start, the first allocation, each kernel's
# import), and a probe of olmo-doctor's own that failed. CUDA's own failures count on a GPU plan only.
CUDA_EVIDENCE = (("torch.cuda_init_error", "starting CUDA"), ("torch.cuda_exercise_error", "the first CUDA allocation"))
MEMORY_EVIDENCE = (("process.error", "the run"), ("torch.import_error", "importing torch"),
                   ("flash_attn.import_error", "loading flash-attn"),
                   ("flash_attn_3.import_error", "loading FlashAttention-3"),
                   ("xformers.import_error", "loading xformers"), ("torchao.import_error", "loading torchao"),
                   ("probe.error", "an olmo-doctor probe"))


def memory_evidence(facts: Mapping[str, FactValue]) -> tuple[str, str] | None:
    """(what failed, its error) for the first failure in the facts that says this process ran out of memory for
    its own mappings (loader_errors.memory_failure), or None."""
    from olmo_doctor.loader_errors import memory_failure

    for key, what in (CUDA_EVIDENCE if _plans_gpu(facts) else ()) + MEMORY_EVIDENCE:
        error = facts.get(key)
        if isinstance(error, str) and error and memory_failure(error):
            return what, error
    return None


def _set_limit(facts: Mapping[str, FactValue]) -> tuple[str, str, int] | None:
    """(name, ulimit flag, bytes) of the address-space limit, else the data limit, when one is set."""
    for name, flag in (("as", "-v"), ("data", "-d")):
        value = _limit(facts, name)
        if value is not None:
            return name, flag, value
    return None


def _fields(name: str, flag: str, value: int, stops: str, detail: str) -> dict[str, object]:
    return {"limit_flag": flag, "limit_value": _human(value), "limit_name": name, "stops": stops, "detail": detail}


@fact_check
def address_space_stops_cuda(facts: Mapping[str, FactValue]) -> Context:
    """A memory limit (ulimit -v / -d) that stops training: this process failed to map or allocate memory for
    itself under it (any plan), or, on a GPU plan, it is below what CUDA reserves when it starts."""
    limit = _set_limit(facts)
    if limit is None:
        return None
    name, flag, value = limit
    seen = memory_evidence(facts)
    if seen is not None:
        what, error = seen
        return _fields(name, flag, value, what, f"{what} failed for lack of memory under it: {error}")
    if not _plans_gpu(facts) or facts.get("torch.cuda_available") is True:
        return None  # the torch worker started CUDA under this very limit (its cache key holds the limits)
    needed = _address_space_needed(facts)
    # without torch's own error, only the address-space limit is judged by size (CUDA's reservations are not
    # writable memory, which is all RLIMIT_DATA counts)
    if name != "as" or value >= needed:
        return None
    return _fields(name, flag, value, "starting CUDA",
                   f"starting CUDA reserves host virtual address space for unified addressing (about twice the GPUs' "
                   f"memory) before any tensor exists: about {_human(needed)} here, and torch.cuda.is_available() "
                   f"then returns False (\"cudaGetDeviceCount() ... Error 2: out of memory\")")


@fact_check
def cpu_time_limited(facts: Mapping[str, FactValue]) -> Context:
    """A CPU-time limit (ulimit -t): the kernel kills the run once its threads together used that many seconds."""
    value = _limit(facts, "cpu")
    if value is None:
        return None
    return {"cpu_seconds": value, "cpu_hours": f"{value / 3600:.1f}"}


@fact_check
def file_size_limited(facts: Mapping[str, FactValue]) -> Context:
    """A file-size limit (ulimit -f) below the size of checkpoints, shards and wheels."""
    value = _limit(facts, "fsize")
    return {"fsize": _human(value)} if value is not None and value < FSIZE_FLOOR else None


@fact_check
def process_limit_low(facts: Mapping[str, FactValue]) -> Context:
    """A process/thread limit (ulimit -u) too low for the threads training starts; root is exempt."""
    value = _limit(facts, "nproc")
    if value is None or facts.get("user.is_root") is True:
        return None
    cpus = facts.get("cpu.physical_count") or facts.get("cpu.count")
    floor = max(NPROC_FLOOR, NPROC_PER_CPU * cpus) if isinstance(cpus, int) else NPROC_FLOOR
    return {"nproc": value, "nproc_floor": floor} if value < floor else None
