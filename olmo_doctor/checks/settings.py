"""Conditions on settings in the environment that every process of a run inherits: debugging switches left on,
an OpenMP thread count OpenMP cannot read, a library LD_PRELOAD names that the loader cannot load, and the shared
memory folder multiprocessing and NCCL need."""

from __future__ import annotations

import re
from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue

# Debugging switches that cost a training run dearly when left set: (variable, is it on for this value, what it
# does). Sources: CUDA's environment variables (CUDA_LAUNCH_BLOCKING=1: launches are synchronous), torch's
# CUDACachingAllocator (forceUncachedAllocator: c10::utils::check_env, so exactly "1" turns the cache off, "0" leaves
# it on and any other value is ignored with a warning; torch before it tested only that the variable exists),
# torch/__init__.py
# (TORCH_CUDA_SANITIZER set to anything enables CSAN), torch.distributed (TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every
# process group to check each collective against the other ranks first).
DEBUG_SWITCHES: tuple[tuple[str, str, str], ...] = (
    ("CUDA_LAUNCH_BLOCKING", r"\s*1\s*",
     "every CUDA kernel launch waits for the GPU to finish, so the CPU never runs ahead of the GPU"),
    ("PYTORCH_NO_CUDA_MEMORY_CACHING", r"1",
     "torch's caching allocator is off: every tensor is a cudaMalloc and a cudaFree, which synchronise the "
     "device"),
    ("TORCH_CUDA_SANITIZER", r"[\s\S]*",
     "CUDA Sanitizer (CSAN) records every tensor access of every kernel launch to find stream races"),
    ("TORCH_DISTRIBUTED_DEBUG", r"\s*DETAIL\s*",
     "each collective is preceded by checks that every rank calls the same one with the same shapes"),
)


def _value(facts: Mapping[str, FactValue], var: str) -> str | None:
    value = facts.get(f"env.{var}")
    return value if isinstance(value, str) else None


@fact_check
def debug_switch_left_on(facts: Mapping[str, FactValue]) -> Context:
    """A debugging switch that slows every step (synchronous launches, no caching allocator, CSAN, DETAIL
    collective checks) is set, on a GPU plan."""
    if facts.get("plan.device") == "cpu":
        return None
    on = [(var, value, what) for var, pattern, what in DEBUG_SWITCHES
          if (value := _value(facts, var)) is not None and re.fullmatch(pattern, value)]
    if not on:
        return None
    return {"switches": ", ".join(f"{var}={value}" for var, value, _ in on),
            "effects": "; ".join(f"{var}: {what}" for var, _, what in on),
            "unset": [var for var, _, _ in on]}  # several words on the command line, each its own


@fact_check
def omp_threads_unreadable(facts: Mapping[str, FactValue]) -> Context:
    """OMP_NUM_THREADS is set to something OpenMP cannot read (not a positive integer or a list of them)."""
    value = _value(facts, "OMP_NUM_THREADS")
    if value is None or re.fullmatch(r"\s*[1-9]\d*(?:\s*,\s*[1-9]\d*)*\s*", value):
        return None
    cpus = facts.get("cpu.count")
    return {"omp_value": repr(value), "cpus": cpus if isinstance(cpus, int) else "all the"}


@fact_check
def preload_not_loaded(facts: Mapping[str, FactValue]) -> Context:
    """The dynamic loader could not load a library LD_PRELOAD names, in a Python process started here."""
    said = facts.get("loader.preload_error")
    if not isinstance(said, str) or not said:
        return None
    named = re.search(r"object '([^']{1,500})'", said)
    return {"preload_said": said, "preload_lib": named.group(1) if named else "a library"}


def _multi_gpu(facts: Mapping[str, FactValue]) -> bool:
    count = facts.get("gpu.count")
    return facts.get("plan.device") != "cpu" and isinstance(count, int) and count >= 2


def _shm_problem(facts: Mapping[str, FactValue]) -> Context:
    error = facts.get("paths.shm_error")
    if not isinstance(error, str) or not error:
        return None
    return {"shm": facts.get("paths.shm") or "/dev/shm", "shm_error": error}


@fact_check
def shared_memory_unusable_multi_gpu(facts: Mapping[str, FactValue]) -> Context:
    """/dev/shm cannot be written, on a plan with several GPUs (NCCL's ranks on a node meet there)."""
    return _shm_problem(facts) if _multi_gpu(facts) else None


@fact_check
def shared_memory_unusable(facts: Mapping[str, FactValue]) -> Context:
    """/dev/shm cannot be written (multiprocessing's locks and queues, prepare-data's workers)."""
    return _shm_problem(facts)
