"""When the build rules fire: refusals and warnings specific to the package being built.

Their text, severity, cause and fixes are rules in known_issues/ like every finding (BK0xx refuse the build,
BK1xx warn; scope "build"); only the condition lives here, because it needs the recipe and the job sizing, which
are not facts. General toolchain problems (nvcc vs torch CUDA, gcc too new, ...) are OD rules of scope install;
the planner adds their errors to the plan's blockers (ninja missing is OD250, CUDA_HOME without headers OD115,
nvcc/torch CUDA mismatch OD110).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from olmo_doctor import tables
from olmo_doctor.build.recipes import Recipe, arch_token
from olmo_doctor.envplan import MEMORY_HEADROOM
from olmo_doctor.facts import Facts, FactValue
from olmo_doctor.findings import Finding
from olmo_doctor.rules.engine import build_finding

if TYPE_CHECKING:
    from olmo_doctor.build.plan import JobSizing

# Share of available memory compile jobs may use (envplan's headroom, one number for check and build), and
# memory kept free for pip, Python, ninja and the final link while nvcc jobs run.
MEMORY_FRACTION = MEMORY_HEADROOM
RESERVED_GB = 1.0


def _older(version: FactValue, minimum: str) -> bool:
    # full PEP 440 order: a nightly or rc of the minimum (2.6.0.dev…) is older than the release it precedes
    v = tables.parse_version(version)
    return v is not None and v < tables.parse_version(minimum)  # type: ignore[operator]


def check_package(recipe: Recipe, facts: Facts, ccs: list[str], archs: list[str]) -> list[Finding]:
    """Refusals specific to this package; general toolchain errors come from the rules (scope install)."""
    out: list[Finding] = []
    pkg = {"package": recipe.package, "version": recipe.version}
    if not ccs:
        out.append(build_finding("BK001", facts, **pkg))
    for cc in ccs:
        if _older(cc, recipe.min_compute_capability) or arch_token(recipe, cc) is None:
            out.append(build_finding("BK002", facts, **pkg, cc=cc, min_cc=recipe.min_compute_capability))
    torch_v, torch_cuda = facts.get("torch.version"), facts.get("torch.cuda")
    if not torch_v:
        out.append(build_finding("BK003", facts, **pkg))
    elif not torch_cuda:
        out.append(build_finding("BK008", facts, **pkg))
    elif _older(torch_v, recipe.min_torch):
        out.append(build_finding("BK004", facts, **pkg, min_torch=recipe.min_torch))
    nvcc = facts.get("nvcc.version")
    if not nvcc:
        out.append(build_finding("BK005", facts, **pkg))
    elif _older(nvcc, recipe.min_cuda):
        out.append(build_finding("BK006", facts, **pkg, min_cuda=recipe.min_cuda))
    else:
        for arch in archs:
            need = recipe.arch.min_nvcc.get(arch)
            if need and _older(nvcc, need):
                out.append(build_finding("BK007", facts, **pkg, arch=arch, min_nvcc=need))
    return out


def check_sizing(facts: Facts, sizing: JobSizing) -> list[Finding]:
    """Warnings about the compile jobs: one may not fit in memory (BK102), --jobs was lowered (BK103)."""
    out: list[Finding] = []
    if sizing.memory_gb is not None and sizing.memory_gb * MEMORY_FRACTION - RESERVED_GB < sizing.gb_per_job:
        out.append(build_finding("BK102", facts, gb_per_job=sizing.gb_per_job, memory_gb=sizing.memory_gb))
    if sizing.requested is not None and sizing.jobs < sizing.requested:
        out.append(build_finding("BK103", facts, requested=sizing.requested, jobs=sizing.jobs, reason=sizing.reason))
    return out
