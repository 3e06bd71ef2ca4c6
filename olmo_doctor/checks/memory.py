"""Conditions on memory that need arithmetic the rule expression language does not have."""

from __future__ import annotations

import math
from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.envplan import max_jobs
from olmo_doctor.facts import FactValue

# Below this much available memory per parallel compile job, nvcc jobs on flash-attn/xformers sources get
# OOM-killed: flash-attn PR #2079 measured 3-5 GB per nvcc thread (~81 GB for MAX_JOBS=4 x 4 threads); the
# flash-attn setup.py comment budgets ~8-9 GB per job at its default NVCC_THREADS=4.
MIN_GB_PER_JOB = 4.0


def planned_jobs(facts: Mapping[str, FactValue]) -> int | None:
    """How many compile jobs a torch extension build would run: MAX_JOBS when it is a number (torch ignores
    anything else), else ninja's default of the CPU count + 2 (torch.utils.cpp_extension._get_num_workers)."""
    env = facts.get("env.MAX_JOBS")
    if isinstance(env, str) and env.strip().isdigit():
        return int(env.strip())
    cpus = facts.get("cpu.count")
    return cpus + 2 if isinstance(cpus, int) else None


@fact_check
def compile_jobs_exceed_memory(facts: Mapping[str, FactValue]) -> Context:
    """The planned parallel compile jobs cannot each get MIN_GB_PER_JOB of the available memory."""
    jobs, avail = planned_jobs(facts), facts.get("mem.available_gb")
    if jobs is None or not isinstance(avail, (int, float)) or isinstance(avail, bool) or jobs <= 0:
        return None
    per_job = avail / jobs
    if per_job >= MIN_GB_PER_JOB:
        return None
    return {
        "planned_jobs": jobs,
        "per_job_gb": f"{per_job:.1f}",
        "safe_jobs": _safe_jobs(facts, avail, jobs),
        "jobs_source": "MAX_JOBS" if facts.get("env.MAX_JOBS") else "ninja's default (CPUs + 2)",
    }


def _safe_jobs(facts: Mapping[str, FactValue], avail: float, jobs: int) -> int:
    """Fewer jobs than planned, each with MIN_GB_PER_JOB (at least one)."""
    safe = max_jobs(facts) or max(1, math.floor(avail / MIN_GB_PER_JOB))
    return max(1, min(safe, jobs - 1)) if jobs > 1 else 1
