"""Recommended build and run environment flags, each with the reason it has this value.

Pure: facts in, flags out. `olmo-doctor env` prints them ready to eval; `check` shows them with reasons;
`fix --apply` writes them to .olmo-doctor/env.sh; build-kernels starts from them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from olmo_doctor.compat.kernels import flash_attn_arch
from olmo_doctor.compat.nvcc import nvcc_supports_cc
from olmo_doctor.compat.release import major_minor
from olmo_doctor.facts import FactValue, gpu_indices

# Peak RSS of one nvcc job compiling a flash-attn 2 translation unit with NVCC_THREADS=1, measured on an H200
# host with nvcc 13.0: 4 to 6.3 GB (recipes/README.md, "Where the numbers come from"; flash-attn PR #2079
# budgets ~5 GB per job and thread). We plan with the worst case so MAX_JOBS never runs a box out of memory.
NVCC_JOB_GB = 6.5
# Leave this share of available memory to the OS, the page cache and the rest of the build.
MEMORY_HEADROOM = 0.9


@dataclass(frozen=True)
class EnvVar:
    value: str
    reason: str


def max_jobs(facts: Mapping[str, FactValue], job_gb: float = NVCC_JOB_GB, threads: int = 1) -> int | None:
    """Parallel compile jobs that fit both the usable CPUs and the available memory."""
    cpus, avail = facts.get("cpu.count"), facts.get("mem.available_gb")
    if not isinstance(cpus, int):
        return None
    if not isinstance(avail, (int, float)):
        return max(1, cpus)
    by_memory = math.floor(avail * MEMORY_HEADROOM / (job_gb * threads))
    return max(1, min(cpus, by_memory))


def visible_ccs(facts: Mapping[str, FactValue]) -> list[str]:
    ccs = {str(facts[k]) for i in gpu_indices(facts) if facts.get(k := f"gpu.{i}.compute_capability")}
    return sorted(ccs, key=lambda c: major_minor(c) or (0, 0))


def _gpu_names(facts: Mapping[str, FactValue], cc: str) -> str:
    names = sorted({str(facts.get(f"gpu.{i}.name")) for i in gpu_indices(facts)
                    if facts.get(f"gpu.{i}.compute_capability") == cc})
    return ", ".join(names) or "GPU"


def _arch_vars(facts: Mapping[str, FactValue]) -> dict[str, EnvVar]:
    """TORCH_CUDA_ARCH_LIST and FLASH_ATTN_CUDA_ARCHS: the visible GPUs' architectures this nvcc can build for."""
    nvcc = facts.get("nvcc.version")
    buildable = [cc for cc in visible_ccs(facts) if nvcc is None or nvcc_supports_cc(nvcc, cc) is not False]
    if not buildable:
        return {}
    desc = "; ".join(f"{_gpu_names(facts, cc)} = {cc}" for cc in buildable)
    env = {"TORCH_CUDA_ARCH_LIST": EnvVar(
        ";".join(buildable), f"exactly the visible GPUs' architectures ({desc}); each extra arch is a full "
        "extra compile of every kernel")}
    fa = sorted({a for cc in buildable if (a := flash_attn_arch(cc))}, key=int)
    if fa:
        env["FLASH_ATTN_CUDA_ARCHS"] = EnvVar(
            ";".join(fa), "flash-attn ignores TORCH_CUDA_ARCH_LIST and maps 8.x->80, 9.0->90, 10.x->100, "
            "12.x->120; its default builds all four")
    return env


def _job_vars(facts: Mapping[str, FactValue]) -> dict[str, EnvVar]:
    """MAX_JOBS and NVCC_THREADS: parallel compiles that fit this machine's CPUs and memory."""
    jobs = max_jobs(facts)
    if jobs is None:
        return {}
    avail = facts.get("mem.available_gb")
    memory = (f"{avail} GB available at ~{NVCC_JOB_GB} GB per nvcc job" if isinstance(avail, int | float)
              else f"available memory ? (unknown; lower it when ~{NVCC_JOB_GB} GB per job does not fit)")
    return {
        "MAX_JOBS": EnvVar(
            str(jobs), f"{facts.get('cpu.count')} usable CPUs (cgroup-aware) and {memory}; flash-attn's own guess "
            "ignores cgroup limits"),
        "NVCC_THREADS": EnvVar(
            "1", "memory per job grows with nvcc threads (flash-attn defaults to 4); MAX_JOBS already uses "
            "the CPUs"),
    }


def _cuda_home_var(facts: Mapping[str, FactValue]) -> dict[str, EnvVar]:
    """CUDA_HOME, where torch would resolve it to a folder without the toolkit's headers."""
    home, root = facts.get("cuda.home"), facts.get("cuda.toolkit_root")
    if not isinstance(root, str) or (facts.get("cuda.home_has_headers") is not False and home is not None):
        return {}
    return {"CUDA_HOME": EnvVar(
        root, f"torch resolves CUDA_HOME to {home}, which has no CUDA headers/libraries; the toolkit "
        f"of {facts.get('nvcc.path')} is {root}")}


def _compiler_vars(facts: Mapping[str, FactValue]) -> dict[str, EnvVar]:
    """CC, CXX and CUDAHOSTCXX, where the default gcc is newer than nvcc accepts and an older one is installed."""
    cxx = pick_host_compiler(facts)
    if cxx is None:
        return {}
    reason = (f"gcc {facts.get('gcc.version')} is newer than nvcc {facts.get('nvcc.version')} accepts "
              f"(<= {facts.get('nvcc.max_gcc')})")
    return {"CC": EnvVar(cxx.replace("g++", "gcc"), reason), "CXX": EnvVar(cxx, reason),
            "CUDAHOSTCXX": EnvVar(cxx, "the host compiler nvcc itself uses")}


_SECTIONS = (_arch_vars, _job_vars, _cuda_home_var, _compiler_vars)


def recommend(facts: Mapping[str, FactValue]) -> dict[str, EnvVar]:
    """The build environment for this machine, in the order it is printed."""
    env: dict[str, EnvVar] = {}
    for section in _SECTIONS:
        env.update(section(facts))
    return env


def pick_host_compiler(facts: Mapping[str, FactValue]) -> str | None:
    """The newest g++-N on PATH that nvcc accepts, when the default one is too new; else None."""
    limit, version = facts.get("nvcc.max_gcc"), facts.get("gcc.version")
    mm = major_minor(version)
    if not isinstance(limit, int) or mm is None or mm[0] <= limit:
        return None
    best = None
    for entry in facts.get("gcc.alternatives") or []:  # type: ignore[union-attr]
        major, _, path = str(entry).partition(":")
        if major.isdigit() and int(major) <= limit:
            best = path
    return best
