"""Reasons to refuse or warn about a build plan that are specific to the package being built.

General toolchain problems (nvcc vs torch CUDA, gcc too new, ...) are rules in known_issues/ (scope install);
the planner adds their errors to the plan's blockers. Codes: BK0xx refuse the build, BK1xx warn (ninja missing is
rule OD250, CUDA_HOME without headers OD115, nvcc/torch CUDA mismatch OD110).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from olmo_doctor import tables
from olmo_doctor.build.recipes import Recipe, arch_token
from olmo_doctor.envplan import MEMORY_HEADROOM
from olmo_doctor.facts import Facts, FactValue
from olmo_doctor.findings import Finding, Fix, Severity

if TYPE_CHECKING:
    from olmo_doctor.build.plan import JobSizing

# Share of available memory compile jobs may use (envplan's headroom, one number for check and build), and
# memory kept free for pip, Python, ninja and the final link while nvcc jobs run.
MEMORY_FRACTION = MEMORY_HEADROOM
RESERVED_GB = 1.0


def _finding(code: str, title: str, message: str, *commands: str, severity: Severity = "error") -> Finding:
    fixes = [Fix(title="Fix", applicability="manual", commands=list(commands))] if commands else []
    return Finding(
        code=code,
        cause="build_plan",
        severity=severity,
        title=title,
        message=message,
        fixes=fixes,
        name="build-kernels",
    )


def _older(version: FactValue, minimum: str) -> bool:
    # full PEP 440 order: a nightly or rc of the minimum (2.6.0.dev…) is older than the release it precedes
    v = tables.parse_version(version)
    return v is not None and v < tables.parse_version(minimum)  # type: ignore[operator]


def check_package(recipe: Recipe, facts: Facts, ccs: list[str], archs: list[str]) -> list[Finding]:
    """Refusals specific to this package; general toolchain errors come from the rules (scope install)."""
    out: list[Finding] = []
    pkg = recipe.package
    if not ccs:
        out.append(
            _finding(
                "BK001",
                "No GPU to build for",
                f"No NVIDIA GPU is visible, so there is no architecture to compile {pkg} for.",
                "olmo-doctor build-kernels --arch 9.0   # build for a GPU that is not in this machine",
            )
        )
    for cc in ccs:
        if _older(cc, recipe.min_compute_capability) or arch_token(recipe, cc) is None:
            out.append(
                _finding(
                    "BK002",
                    f"{pkg} does not support compute capability {cc}",
                    f"{pkg} {recipe.version} needs compute capability {recipe.min_compute_capability} or "
                    f"newer (and one it has kernels for); this GPU is {cc}. Use torch's SDPA instead.",
                    "olmo train ... (torch SDPA is the default attention backend)",
                )
            )
    torch_v, torch_cuda = facts.get("torch.version"), facts.get("torch.cuda")
    if not torch_v:
        out.append(
            _finding(
                "BK003",
                "torch is not importable",
                f"{pkg} compiles against the installed torch, and it could not be imported"
                f" ({facts.get('torch.import_error') or 'not installed'}).",
                "./install.sh",
            )
        )
    elif not torch_cuda:
        out.append(
            _finding(
                "BK003",
                "torch is a CPU-only build",
                f"torch {torch_v} has no CUDA, so CUDA extensions cannot be built against it.",
                "./install.sh   # installs a CUDA torch on a GPU machine",
            )
        )
    elif _older(torch_v, recipe.min_torch):
        out.append(
            _finding(
                "BK004",
                f"torch {torch_v} is too old for {pkg} {recipe.version}",
                f"{pkg} {recipe.version} needs torch >= {recipe.min_torch}.",
                f"pip install 'torch>={recipe.min_torch}'",
            )
        )
    nvcc = facts.get("nvcc.version")
    if not nvcc:
        out.append(
            _finding(
                "BK005",
                "nvcc not found",
                "Building CUDA kernels needs the CUDA toolkit's nvcc (CUDA_HOME/bin/nvcc).",
                "export CUDA_HOME=/usr/local/cuda   # or install the toolkit matching torch's CUDA",
            )
        )
    elif _older(nvcc, recipe.min_cuda):
        out.append(
            _finding(
                "BK006",
                f"nvcc {nvcc} is too old for {pkg} {recipe.version}",
                f"{pkg} {recipe.version} needs CUDA >= {recipe.min_cuda} to build.",
                "install a newer CUDA toolkit and point CUDA_HOME at it",
            )
        )
    else:
        for arch in archs:
            need = recipe.arch.min_nvcc.get(arch)
            if need and _older(nvcc, need):
                out.append(
                    _finding(
                        "BK007",
                        f"nvcc {nvcc} cannot compile for {arch}",
                        f"{pkg} only emits code for {arch} with nvcc >= {need}; the wheel would fail "
                        "with 'no kernel image is available' on this GPU.",
                        f"install CUDA >= {need} and point CUDA_HOME at it",
                    )
                )
    return out


def check_sizing(facts: Facts, sizing: JobSizing) -> list[Finding]:
    out: list[Finding] = []
    if sizing.memory_gb is not None and sizing.memory_gb * MEMORY_FRACTION - RESERVED_GB < sizing.gb_per_job:
        out.append(
            _finding(
                "BK102",
                "Less memory than one compile job needs",
                f"One job peaks near {sizing.gb_per_job:g} GB and {sizing.memory_gb:g} GB is available; "
                "the compiler may be killed (OOM).",
                "add swap, or build on a larger machine",
                severity="warning",
            )
        )
    if sizing.requested is not None and sizing.jobs < sizing.requested:
        out.append(
            _finding(
                "BK103",
                f"--jobs {sizing.requested} lowered to {sizing.jobs}",
                f"MAX_JOBS {sizing.reason}.",
                severity="info",
            )
        )
    return out
