"""The build planner: machine facts + a recipe -> BuildPlan. Pure: no probes, no files, no subprocesses.

Everything `build-kernels` will do is decided here and can be printed (`--dry-run`, `--json`) and tested on a
CPU machine: the target architectures, the exact pip command and environment, how many compile jobs the
machine's memory and CPUs allow, the predicted peak RAM, the wheel-cache key, and the reasons to refuse.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olmo_doctor.build.recipes import Recipe, Subset, arch_token
from olmo_doctor.checks.build import MEMORY_FRACTION, RESERVED_GB, BuildContext
from olmo_doctor.checks.kernels import about_installed_kernel
from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.compat.release import major_minor
from olmo_doctor.facts import Facts, FactValue, gpu_indices
from olmo_doctor.findings import Finding
from olmo_doctor.rules.engine import run_build_rules


@dataclass(frozen=True)
class BuildRequest:
    """What the user asked for (command-line options), independent of the machine."""

    package: str
    version: str | None = None
    source: str | None = None  # a local sdist file or a source tree; None = the recipe's sdist from PyPI
    source_id: str | None = None  # fingerprint of `source` (source.fingerprint), part of the cache key
    source_sha256: str | None = None  # sha256 of a `source` archive: printed in the plan, checked before unpacking
    subset: str | None = None
    jobs: int | None = None
    archs: tuple[str, ...] = ()  # compute capabilities to target instead of the GPUs present ('9.0')
    python: str = "python3"
    work_root: str = "~/.cache/olmo-doctor"  # the user cache; build trees and wheels live under it


@dataclass
class JobSizing:
    jobs: int
    threads_per_job: int  # nvcc threads that really run at once in one job (one per arch compiled)
    gb_per_job: float
    by_cpu: int
    by_memory: int
    translation_units: int
    requested: int | None
    memory_gb: float | None
    cpus: int | None
    reason: str


@dataclass
class BuildPlan:
    package: str
    version: str  # the version the wheel will carry, with the subset's local tag
    recipe_version: str
    subset: str | None
    gpus: list[str]
    compute_capabilities: list[str]
    archs: list[str]
    source: dict[str, Any]
    env: dict[str, str]
    argv: list[str]
    work_dir: str
    wheel_dir: str
    nvcc_threads: int
    sizing: JobSizing
    translation_units: int
    predicted_peak_gb: float
    cache_key: dict[str, Any]
    cache_digest: str
    blockers: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    # errors about kernels already installed (shown, never blocking: building is their fix)
    installed_kernels: list[Finding] = field(default_factory=list)
    compile_jobs: int = 0  # files compiled: translation_units, or more when the subset splits branches
    split_branches: bool = False

    @property
    def ok(self) -> bool:
        return not self.blockers

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "version": self.version,
            "recipe_version": self.recipe_version,
            "subset": self.subset,
            "gpus": self.gpus,
            "compute_capabilities": self.compute_capabilities,
            "archs": self.archs,
            "source": self.source,
            "env": self.env,
            "argv": self.argv,
            "work_dir": self.work_dir,
            "wheel_dir": self.wheel_dir,
            "max_jobs": self.sizing.jobs,
            "nvcc_threads": self.nvcc_threads,
            "jobs_sizing": {
                "by_cpu": self.sizing.by_cpu,
                "by_memory": self.sizing.by_memory,
                "translation_units": self.sizing.translation_units,
                "requested": self.sizing.requested,
                "gb_per_job": self.sizing.gb_per_job,
                "memory_gb": self.sizing.memory_gb,
                "cpus": self.sizing.cpus,
                "reason": self.sizing.reason,
            },
            "translation_units": self.translation_units,
            "compile_jobs": self.compile_jobs or self.translation_units,
            "split_branches": self.split_branches,
            "predicted_peak_gb": self.predicted_peak_gb,
            "cache_key": self.cache_key,
            "cache_digest": self.cache_digest,
            "ok": self.ok,
            "blockers": [f.to_json() for f in self.blockers],
            "warnings": [f.to_json() for f in self.warnings],
            "installed_kernels": [f.to_json() for f in self.installed_kernels],
        }


def size_jobs(
    memory_gb: float | None,
    cpus: int | None,
    gb_per_job: float,
    threads_per_job: int,
    translation_units: int,
    requested: int | None,
) -> JobSizing:
    """MAX_JOBS: never more than memory allows (jobs x per-job peak), the usable CPUs, or the work."""
    usable = None if memory_gb is None else max(0.0, memory_gb * MEMORY_FRACTION - RESERVED_GB)
    by_memory = 1 if usable is None else max(1, math.floor(usable / gb_per_job))
    by_cpu = max(1, (cpus or 1) // threads_per_job)
    limits = {"memory": by_memory, "CPUs": by_cpu, "compile jobs": translation_units}
    if requested is not None:
        limits["--jobs"] = max(1, requested)
    jobs = min(limits.values())
    binding = [name for name, value in limits.items() if value == jobs]
    reason = f"{jobs} = min({', '.join(f'{k} {v}' for k, v in limits.items())}); bound by {' and '.join(binding)}"
    return JobSizing(
        jobs,
        threads_per_job,
        gb_per_job,
        by_cpu,
        by_memory,
        translation_units,
        requested,
        memory_gb,
        cpus,
        reason,
    )


def peak_gb(jobs: int, heaviest_gb: float, mean_gb: float) -> float:
    """Predicted peak RAM of a build: the reserve, the heaviest job, and the other jobs' mean share at that moment.
    The shares are fitted to measured peaks (recipes/README.md): units start together but peak at different times,
    so the others' share is below their peak alone (xformers: one CUTLASS-3 unit is nearly all of it)."""
    return round(RESERVED_GB + heaviest_gb + max(0, jobs - 1) * mean_gb, 1)


def target_ccs(facts: Facts, request: BuildRequest) -> tuple[list[str], list[str]]:
    """(GPU names, distinct compute capabilities) to build for: --arch wins over the GPUs present."""
    if request.archs:
        return [], sorted({_cc(a) for a in request.archs}, key=_cc_key)
    names, ccs = [], []
    for i in gpu_indices(facts):
        name = str(facts.get(f"gpu.{i}.name") or f"GPU {i}")
        cc = facts.get(f"gpu.{i}.compute_capability") or name_to_cc(name)
        names.append(name)
        if cc:
            ccs.append(_cc(str(cc)))
    return names, sorted(set(ccs), key=_cc_key)


def _cc(text: str) -> str:
    mm = major_minor(text.rstrip("a"))
    return f"{mm[0]}.{mm[1]}" if mm else text


def _token_key(token: str) -> float:
    """'90' -> 9.0, '120' -> 12.0, '90a' -> 9.0, '9.0a' -> 9.0: tokens sorted by compute capability."""
    digits = re.match(r"[\d.]+", token)
    number = digits.group(0) if digits else "0"
    return float(number) if "." in number else int(number) / 10


def _cc_key(cc: str) -> tuple[int, int]:
    return major_minor(cc) or (0, 0)


def _python_abi(version: FactValue) -> str | None:
    mm = major_minor(version)
    return f"cp{mm[0]}{mm[1]}" if mm else None


@dataclass(frozen=True)
class _Load:
    """How the compile is cut into jobs: the sizing, the heaviest job's and the others' mean GB, split or not."""

    sizing: JobSizing
    heaviest_gb: float
    mean_gb: float
    split: bool = False


def _machine(facts: Facts) -> tuple[float | None, int | None]:
    """(GB of memory to plan with, CPUs), None where the facts do not say."""
    mem = facts.get("mem.available_gb") or facts.get("mem.total_gb")
    cpus = facts.get("cpu.count")
    return (float(mem) if isinstance(mem, (int, float)) else None), (cpus if isinstance(cpus, int) else None)


def _load(facts: Facts, recipe: Recipe, subset: Subset | None, request: BuildRequest, working: int) -> _Load:
    """MAX_JOBS is sized with the heaviest unit's peak (safe whichever units run together); the expected peak is
    the heaviest job plus the others' mean share at that moment (peak_gb: jobs rarely peak together)."""
    memory_gb, cpu_count = _machine(facts)
    gb_job = (subset.gb_per_job_arch if subset else recipe.gb_per_job_arch) * working
    mean = (subset.gb_mean_per_job_arch if subset else recipe.gb_mean_per_job_arch or recipe.gb_per_job_arch) * working
    tus = subset.translation_units if subset else recipe.translation_units
    whole = _Load(size_jobs(memory_gb, cpu_count, gb_job, working, tus, request.jobs), gb_job, mean)
    if not (subset and subset.split_branches):
        return whole
    # Branch files cut the slowest job (a whole kernel file) to its slowest branch, but repeat ~15 s of
    # headers per file: a win only when every long job runs in the same wave (routers are seconds long).
    branch_gb = (subset.gb_per_branch_job or subset.gb_per_job_arch) * working
    wide = size_jobs(memory_gb, cpu_count, branch_gb, working, subset.compile_units, request.jobs)
    if wide.jobs < subset.compile_units - subset.routers:
        return whole
    return _Load(wide, branch_gb, subset.gb_mean_per_branch_job * working, split=True)


def _subset_key(subset: Subset | None) -> dict[str, Any]:
    """How the subset edits the source: a wheel from an earlier transformation (FA3 before its Python guard) is
    not reused."""
    if subset is None:
        return {"subset": None, "subset_transform": None, "subset_edits": None}
    return {"subset": subset.name, "subset_transform": subset.transform,
            "subset_edits": {"drop": list(subset.drop_switches),
                             "split": {k: list(v) for k, v in subset.split_switches.items()}}}


def _cache_key(facts: Facts, recipe: Recipe, subset: Subset | None, request: BuildRequest, version: str,
               archs: list[str], split: bool) -> dict[str, Any]:
    return {
        "package": recipe.package,
        "version": version,
        **_subset_key(subset),
        "torch": facts.get("torch.version"),
        "cuda": facts.get("torch.cuda"),
        "nvcc": facts.get("nvcc.version"),
        "archs": archs,
        "python_abi": _python_abi(facts.get("python.version")),
        "cxx11_abi": facts.get("torch.cxx11abi"),
        "platform": facts.get("os.arch"),
        "source_sha256": None if request.source else recipe.sha256,
        "source_path": request.source,
        "source_id": request.source_id,
        "split_branches": split,
    }


def _pip_argv(python: str, work: Path, tree: Path) -> list[str]:
    # -I: pip itself from the environment, never a pip/ of the working folder
    return [python, "-I", "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "-w", str(work / "dist"), str(tree)]


def _source(recipe: Recipe, request: BuildRequest) -> dict[str, Any]:
    if request.source:
        return {"kind": "path", "location": request.source,
                **({"sha256": request.source_sha256} if request.source_sha256 else {})}
    return {"kind": "sdist", "location": f"PyPI {recipe.package}=={recipe.version}", "file": recipe.sdist,
            "sha256": recipe.sha256}


def _judged(found: list[Finding], own: list[Finding]) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """(blockers, warnings, installed kernels) of the check findings `found` and the build rules' own.
    A finding about a kernel already installed never refuses a build: building is its fix (build/verdict.py)."""
    errors = _errors(found)
    installed = [f for f in errors if about_installed_kernel(f.code)]
    blockers = _errors(own) + [f for f in errors if f not in installed]
    warnings = [f for f in found if f.severity == "warning"] + [f for f in own if f.severity != "error"]
    return blockers, warnings, installed


def _errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def _nvcc_threads(recipe: Recipe, archs: list[str]) -> int:
    """nvcc --threads: the recipe's fixed number, else one per arch compiled up to its maximum."""
    return recipe.fixed_threads or max(1, min(len(archs) or 1, recipe.max_threads))


def _source_dir(work: Path, recipe: Recipe) -> Path:
    """Where pip builds from: the fetched tree, or the recipe's subfolder of it."""
    return work / "src" / recipe.subdir if recipe.subdir else work / "src"


def plan_build(
    facts: Facts, recipe: Recipe, request: BuildRequest, check_findings: list[Finding] | None = None
) -> BuildPlan:
    """Everything the build will do on this machine. `check_findings`: the install-scope rules' findings
    (`run_rules(facts, scope="install")`); their errors refuse the build, their warnings are shown."""
    # the caller validated the subset's name against the recipe
    subset = recipe.subsets[request.subset] if request.subset is not None else None
    names, ccs = target_ccs(facts, request)
    archs = sorted({t for t in (arch_token(recipe, cc) for cc in ccs) if t}, key=_token_key)
    tus = subset.translation_units if subset else recipe.translation_units
    threads = _nvcc_threads(recipe, archs)
    # nvcc --threads only runs gencode targets in parallel: memory and CPU grow with the archs compiled
    load = _load(facts, recipe, subset, request, working=max(1, min(len(archs) or 1, threads)))
    version = recipe.version + (f"+{subset.local_version}" if subset else "")
    key = _cache_key(facts, recipe, subset, request, version, archs, load.split)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    work = Path(request.work_root).expanduser() / "build" / f"{recipe.package}-{digest}"
    own = run_build_rules(facts, BuildContext(recipe, tuple(ccs), tuple(archs), load.sizing))
    blockers, warnings, installed = _judged(check_findings or [], own)
    return BuildPlan(
        package=recipe.package,
        version=version,
        recipe_version=recipe.version,
        subset=subset.name if subset else None,
        gpus=names,
        compute_capabilities=ccs,
        archs=archs,
        source=_source(recipe, request),
        env=_env(recipe, subset, facts, archs, load.sizing.jobs, threads),
        argv=_pip_argv(request.python, work, _source_dir(work, recipe)),
        work_dir=str(work),
        wheel_dir=str(work / "dist"),
        nvcc_threads=threads,
        sizing=load.sizing,
        translation_units=tus,
        compile_jobs=subset.compile_units if load.split and subset else tus,
        split_branches=load.split,
        predicted_peak_gb=peak_gb(load.sizing.jobs, load.heaviest_gb, load.mean_gb),
        cache_key=key,
        cache_digest=digest,
        blockers=blockers,
        warnings=warnings,
        installed_kernels=installed,
    )


def _env(
    recipe: Recipe, subset: Subset | None, facts: Facts, archs: list[str], jobs: int, threads: int
) -> dict[str, str]:
    env = dict(recipe.env)
    if archs and recipe.arch.env:
        env[recipe.arch.env] = recipe.arch.separator.join(archs)
    env["MAX_JOBS"] = str(jobs)
    if recipe.threads_env:
        env[recipe.threads_env] = str(threads)
    if subset:
        env.update(subset.env)
        env[subset.local_version_env] = subset.local_version
    env.update(_toolchain(facts))
    if facts.get("ccache.path"):
        nvcc = f"{env['CUDA_HOME']}/bin/nvcc" if "CUDA_HOME" in env else "nvcc"
        env["PYTORCH_NVCC"] = f"{facts['ccache.path']} {nvcc}"  # torch's hook for a compiler cache
    return env


def _toolchain(facts: Facts) -> dict[str, str]:
    """CUDA_HOME when it has the headers, and CC/CXX as a matching pair (torch passes -ccbin $CC to nvcc)."""
    env = {}
    home = facts.get("cuda.home")
    if home and facts.get("cuda.home_has_headers") is not False:
        env["CUDA_HOME"] = str(home)
    cxx = facts.get("gcc.cxx_env") or facts.get("gcc.path")
    cc = facts.get("gcc.cc_env") or (_sibling_cc(str(cxx)) if cxx else None)
    if cxx and cc:
        env["CC"], env["CXX"] = str(cc), str(cxx)
    return env


def _sibling_cc(cxx: str) -> str | None:
    """/usr/bin/g++-12 -> /usr/bin/gcc-12; clang++ -> clang; anything else: unknown."""
    head, _, name = cxx.rpartition("/")
    for plus, plain in (("g++", "gcc"), ("clang++", "clang"), ("c++", "cc")):
        if name.startswith(plus):
            return (head + "/" if head else "") + plain + name[len(plus) :]
    return None
