"""When the build rules fire: refusals (BK0xx) and warnings (BK1xx) of a planned kernel build.

Their text, severity, cause and fixes are rules in known_issues/ like every finding (scope "build"); only the
condition lives here, because it needs the recipe, the target GPUs and the job sizing, which are not facts. The
planner hands them over as a BuildContext. General toolchain problems (nvcc vs torch CUDA, gcc too new, ...)
are OD rules of scope install; the planner adds their errors to the plan's blockers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from olmo_doctor.checks import Context, build_check
from olmo_doctor.compat.versions import parse_version
from olmo_doctor.envplan import MEMORY_HEADROOM
from olmo_doctor.facts import FactValue

if TYPE_CHECKING:
    from olmo_doctor.build.plan import JobSizing
    from olmo_doctor.build.recipes import Recipe

# Share of available memory compile jobs may use (envplan's headroom, one number for check and build), and
# memory kept free for pip, Python, ninja and the final link while nvcc jobs run.
MEMORY_FRACTION = MEMORY_HEADROOM
RESERVED_GB = 1.0


@dataclass(frozen=True)
class BuildContext:
    """What the planner decided that the build conditions read: the recipe, the compute capabilities and
    architecture tokens it targets, and how it sized the compile jobs."""

    recipe: Recipe
    ccs: tuple[str, ...]
    archs: tuple[str, ...]
    sizing: JobSizing

    def fields(self, **more: Any) -> dict[str, Any]:
        """Template values every build finding may use, plus `more`."""
        return {"package": self.recipe.package, "version": self.recipe.version, **more}


def _older(version: FactValue, minimum: str) -> bool:
    # full PEP 440 order: a nightly or rc of the minimum (2.6.0.dev…) is older than the release it precedes
    v = parse_version(version)
    return v is not None and v < parse_version(minimum)  # type: ignore[operator]


@build_check
def no_gpu(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """No GPU is visible and no --arch was given: nothing to compile for."""
    return None if build.ccs else build.fields()


@build_check
def gpu_not_supported(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """A target GPU is below the package's minimum compute capability, or the package has no kernels for it."""
    from olmo_doctor.build.recipes import arch_token

    recipe = build.recipe
    bad = [cc for cc in build.ccs if _older(cc, recipe.min_compute_capability) or arch_token(recipe, cc) is None]
    return build.fields(cc=", ".join(bad), min_cc=recipe.min_compute_capability) if bad else None


@build_check
def torch_missing(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """No torch to build against."""
    return None if facts.get("torch.version") else build.fields()


@build_check
def torch_cpu_build(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """torch is installed but is a CPU-only build."""
    return build.fields() if facts.get("torch.version") and not facts.get("torch.cuda") else None


@build_check
def torch_too_old(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """A CUDA torch older than the package's minimum."""
    version = facts.get("torch.version")
    if not version or not facts.get("torch.cuda") or not _older(version, build.recipe.min_torch):
        return None
    return build.fields(min_torch=build.recipe.min_torch)


@build_check
def nvcc_missing(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """No nvcc to compile with."""
    return None if facts.get("nvcc.version") else build.fields()


@build_check
def nvcc_too_old(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """nvcc is older than the package's minimum CUDA."""
    nvcc = facts.get("nvcc.version")
    if not nvcc or not _older(nvcc, build.recipe.min_cuda):
        return None
    return build.fields(min_cuda=build.recipe.min_cuda)


def _archs_too_new(nvcc: FactValue, build: BuildContext) -> list[tuple[str, str]]:
    """(arch, the nvcc it needs) for each target architecture this nvcc is too old for."""
    need = {arch: build.recipe.arch.min_nvcc.get(arch) for arch in build.archs}
    return [(arch, floor) for arch, floor in need.items() if floor and _older(nvcc, floor)]


@build_check
def nvcc_cannot_target_arch(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """nvcc meets the package's minimum but is too old for one of the target architectures."""
    nvcc = facts.get("nvcc.version")
    bad = _archs_too_new(nvcc, build) if nvcc and not _older(nvcc, build.recipe.min_cuda) else []
    if not bad:
        return None
    newest = next(f for _, f in bad if all(not _older(f, other) for _, other in bad))
    return build.fields(arch=", ".join(a for a, _ in bad), min_nvcc=newest)


@build_check
def compile_job_exceeds_memory(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """Even one compile job may not fit in the memory the build may use."""
    sizing = build.sizing
    if sizing.memory_gb is None or sizing.memory_gb * MEMORY_FRACTION - RESERVED_GB >= sizing.gb_per_job:
        return None
    return build.fields(gb_per_job=sizing.gb_per_job, memory_gb=sizing.memory_gb)


@build_check
def jobs_lowered(facts: Mapping[str, FactValue], build: BuildContext) -> Context:
    """--jobs asked for more compile jobs than the machine's CPUs or memory allow."""
    sizing = build.sizing
    if sizing.requested is None or sizing.jobs >= sizing.requested:
        return None
    return build.fields(requested=sizing.requested, jobs=sizing.jobs, reason=sizing.reason)
