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

from olmo_doctor import tables
from olmo_doctor.build.checks import MEMORY_FRACTION, RESERVED_GB, check_package, check_sizing
from olmo_doctor.build.recipes import Recipe, Subset, arch_token
from olmo_doctor.facts import Facts, FactValue, gpu_indices
from olmo_doctor.findings import Finding


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


def target_ccs(facts: Facts, request: BuildRequest) -> tuple[list[str], list[str]]:
    """(GPU names, distinct compute capabilities) to build for: --arch wins over the GPUs present."""
    if request.archs:
        return [], sorted({_cc(a) for a in request.archs}, key=_cc_key)
    names, ccs = [], []
    for i in gpu_indices(facts):
        name = str(facts.get(f"gpu.{i}.name") or f"GPU {i}")
        cc = facts.get(f"gpu.{i}.compute_capability") or tables.gpu_name_to_cc(name)
        names.append(name)
        if cc:
            ccs.append(_cc(str(cc)))
    return names, sorted(set(ccs), key=_cc_key)


def _cc(text: str) -> str:
    mm = tables.major_minor(text.rstrip("a"))
    return f"{mm[0]}.{mm[1]}" if mm else text


def _token_key(token: str) -> float:
    """'90' -> 9.0, '120' -> 12.0, '90a' -> 9.0, '9.0a' -> 9.0: tokens sorted by compute capability."""
    digits = re.match(r"[\d.]+", token)
    number = digits.group(0) if digits else "0"
    return float(number) if "." in number else int(number) / 10


def _cc_key(cc: str) -> tuple[int, int]:
    return tables.major_minor(cc) or (0, 0)


def _python_abi(version: FactValue) -> str | None:
    mm = tables.major_minor(version)
    return f"cp{mm[0]}{mm[1]}" if mm else None


def plan_build(
    facts: Facts, recipe: Recipe, request: BuildRequest, check_findings: list[Finding] | None = None
) -> BuildPlan:
    """Everything the build will do on this machine. `check_findings`: the install-scope rules' findings
    (`run_rules(facts, scope="install")`); their errors refuse the build, their warnings are shown."""
    subset: Subset | None = None
    if request.subset is not None:
        subset = recipe.subsets[request.subset]  # the caller validated the name against the recipe
    names, ccs = target_ccs(facts, request)
    archs = sorted(
        {t for t in (arch_token(recipe, cc) for cc in ccs) if t},
        key=_token_key,
    )
    tus = subset.translation_units if subset else recipe.translation_units
    threads = recipe.fixed_threads or max(1, min(len(archs) or 1, recipe.max_threads))
    # nvcc --threads only runs gencode targets in parallel: memory and CPU grow with the archs compiled
    working = max(1, min(len(archs) or 1, threads))
    gb_job = (subset.gb_per_job_arch if subset else recipe.gb_per_job_arch) * working
    # MAX_JOBS is sized with the heaviest unit's peak (safe whichever units run together); the expected
    # peak is jobs x the mean unit (measured: 2 jobs peaked at 8.1-8.4 GB, 2 x 4.4 + 1 predicts 9.8)
    mean = (subset.gb_mean_per_job_arch if subset else recipe.gb_per_job_arch) * working
    mem = facts.get("mem.available_gb") or facts.get("mem.total_gb")
    cpus = facts.get("cpu.count")
    memory_gb = float(mem) if isinstance(mem, (int, float)) else None
    cpu_count = cpus if isinstance(cpus, int) else None
    split = False
    sizing = size_jobs(memory_gb, cpu_count, gb_job, working, tus, request.jobs)
    if subset and subset.split_branches:
        # Branch files cut the slowest job (a whole kernel file) to its slowest branch, but repeat ~15 s of
        # headers per file: a win only when every long job runs in the same wave (routers are seconds long).
        wide = size_jobs(memory_gb, cpu_count, gb_job, working, subset.compile_units, request.jobs)
        long_jobs = subset.compile_units - subset.routers
        if wide.jobs >= long_jobs:
            split, sizing = True, wide
            mean = subset.gb_mean_per_branch_job * working
    version = recipe.version + (f"+{subset.local_version}" if subset else "")
    key = {
        "package": recipe.package,
        "version": version,
        "subset": subset.name if subset else None,
        # how the subset edits the source: a wheel from an earlier transformation (FA3 before its Python guard) is
        # not reused
        "subset_transform": subset.transform if subset else None,
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
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(request.work_root).expanduser()
    work = root / "build" / f"{recipe.package}-{digest}"
    env = _env(recipe, subset, facts, archs, sizing.jobs, threads)
    tree = work / "src" / recipe.subdir if recipe.subdir else work / "src"
    argv = [
        request.python,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-build-isolation",
        "--no-deps",
        "--no-index",
        "-w",
        str(work / "dist"),
        str(tree),
    ]
    source = (
        {"kind": "path", "location": request.source,
         **({"sha256": request.source_sha256} if request.source_sha256 else {})}
        if request.source
        else {
            "kind": "sdist",
            "location": f"PyPI {recipe.package}=={recipe.version}",
            "file": recipe.sdist,
            "sha256": recipe.sha256,
        }
    )
    found = check_findings or []
    blockers = check_package(recipe, facts, ccs, archs) + [f for f in found if f.severity == "error"]
    return BuildPlan(
        package=recipe.package,
        version=version,
        recipe_version=recipe.version,
        subset=subset.name if subset else None,
        gpus=names,
        compute_capabilities=ccs,
        archs=archs,
        source=source,
        env=env,
        argv=argv,
        work_dir=str(work),
        wheel_dir=str(work / "dist"),
        nvcc_threads=threads,
        sizing=sizing,
        translation_units=tus,
        compile_jobs=subset.compile_units if split and subset else tus,
        split_branches=split,
        predicted_peak_gb=round(sizing.jobs * mean + RESERVED_GB, 1),
        cache_key=key,
        cache_digest=digest,
        blockers=blockers,
        warnings=[f for f in found if f.severity == "warning"] + check_sizing(facts, sizing),
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
    home = facts.get("cuda.home")
    if home and facts.get("cuda.home_has_headers") is not False:
        env["CUDA_HOME"] = str(home)
    cxx = facts.get("gcc.cxx_env") or facts.get("gcc.path")
    cc = facts.get("gcc.cc_env") or (_sibling_cc(str(cxx)) if cxx else None)
    if cxx and cc:  # torch passes -ccbin $CC to nvcc: the host compiler pair must match
        env["CC"], env["CXX"] = str(cc), str(cxx)
    if facts.get("ccache.path"):
        nvcc = f"{env['CUDA_HOME']}/bin/nvcc" if "CUDA_HOME" in env else "nvcc"
        env["PYTORCH_NVCC"] = f"{facts['ccache.path']} {nvcc}"  # torch's hook for a compiler cache
    return env


def _sibling_cc(cxx: str) -> str | None:
    """/usr/bin/g++-12 -> /usr/bin/gcc-12; clang++ -> clang; anything else: unknown."""
    head, _, name = cxx.rpartition("/")
    for plus, plain in (("g++", "gcc"), ("clang++", "clang"), ("c++", "cc")):
        if name.startswith(plus):
            return (head + "/" if head else "") + plain + name[len(plus) :]
    return None
