"""Build recipes: load and validate recipes/<package>-<version>.toml (data about one pinned kernel package).

A recipe says what to download (sdist name and sha256), what the package needs (CUDA, torch, compute
capability), how it names target architectures, how much memory one compile job takes, which environment
the build wants, and which subsets exist. The planner (plan.py) turns a recipe plus machine facts into a
BuildPlan.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olmo_common.bounded.files import read_text
from olmo_doctor.compat.release import major_minor
from olmo_doctor.errors import UsageError
from olmo_doctor.resources import data_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PACKAGES = ("flash-attn", "xformers", "flash-attn-3")


@dataclass(frozen=True)
class Subset:
    """A named reduced build (e.g. 'olmo'): which kernels stay and how the source is transformed."""

    name: str
    description: str
    transform: str
    local_version: str
    local_version_env: str
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    directions: tuple[str, ...]
    causal: tuple[bool, ...]
    defines: tuple[str, ...]
    translation_units: int
    gb_per_job_arch: float
    env: dict[str, str] = field(default_factory=dict)  # e.g. FlashAttention-3's FLASH_ATTENTION_DISABLE_*
    gb_mean_per_job_arch: float = 0.0  # mean unit peak (predicts the peak when all units run at once)
    split_directions: tuple[str, ...] = ()  # kernel files (fwd/fwd_split/bwd) compiled as one file per branch
    compile_jobs: int = 0  # files compiled after the split (= translation_units without it)
    gb_mean_per_branch_job: float = 0.0  # mean peak of the jobs running together after the split
    # FlashAttention-3: per split direction, the runtime switches fixed per branch file (branches_fa3.py)
    split_switches: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gb_per_branch_job: float = 0.0  # the heaviest job after the split (0: the unsplit heaviest)
    drop_switches: tuple[str, ...] = ()  # FlashAttention-3: runtime switches compiled to false (trim_fa3.py)

    @property
    def compile_units(self) -> int:
        return self.compile_jobs or self.translation_units

    @property
    def split_branches(self) -> bool:
        return bool(self.split_directions)

    @property
    def routers(self) -> int:
        """Kernel files that become routers when split (each is a short job). flash-attn 2 has a file per causal
        flag; FlashAttention-3 one per (direction, head dim, dtype), causal being one of its runtime branches."""
        per_causal = 1 if self.split_switches else len(self.causal)
        return len(self.split_directions) * len(self.head_dims) * len(self.dtypes) * per_causal


@dataclass(frozen=True)
class ArchSpec:
    """How the package is told its target GPUs."""

    env: str
    separator: str
    by_major: dict[str, str] = field(default_factory=dict)  # flash-attn tokens by CC major
    fmt: str = "token"  # "token": by_major lookup; "cc": 'X.Y' (+ 'a' from arch_specific_from_major)
    arch_specific_from_major: int | None = None
    min_nvcc: dict[str, str] = field(default_factory=dict)
    gencode: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Recipe:
    package: str
    version: str
    import_name: str
    sdist: str
    sha256: str
    submodule_marker: str
    submodule_fix: str
    min_cuda: str
    min_torch: str
    min_compute_capability: str
    translation_units: int
    arch: ArchSpec
    threads_env: str
    max_threads: int
    fixed_threads: int | None
    gb_per_job_arch: float
    env: dict[str, str]
    subsets: dict[str, Subset]
    gb_mean_per_job_arch: float = 0.0  # the other jobs' share at the peak (0: as heavy as the heaviest)
    extension: str = ""
    verify_info: bool = False
    subdir: str = ""  # where setup.py lives inside the source tree (FlashAttention-3: hopper)
    path: Path = Path()

    @property
    def needs_source(self) -> bool:
        """No sdist on PyPI (FlashAttention-3): the user must pass --source with a git checkout."""
        return not self.sdist


def _need(table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in table:
        raise UsageError(f"{where}: missing '{key}'")
    value = table[key]
    if kind is float and isinstance(value, int):
        value = float(value)
    if not isinstance(value, kind):
        raise UsageError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r}")
    return value


def _subset(name: str, t: dict[str, Any], where: str) -> Subset:
    w = f"{where} [subset.{name}]"
    return Subset(
        name=name,
        description=_need(t, "description", str, w),
        transform=_need(t, "transform", str, w),
        local_version=_need(t, "local_version", str, w),
        local_version_env=_need(t, "local_version_env", str, w),
        head_dims=tuple(_need(t, "head_dims", list, w)),
        dtypes=tuple(_need(t, "dtypes", list, w)),
        directions=tuple(_need(t, "directions", list, w)),
        causal=tuple(_need(t, "causal", list, w)),
        defines=tuple(t.get("defines", [])),
        translation_units=_need(t, "translation_units", int, w),
        gb_per_job_arch=_need(t, "gb_per_job_arch", float, w),
        env={k: str(v) for k, v in t.get("env", {}).items()},
        gb_mean_per_job_arch=float(t.get("gb_mean_per_job_arch", t["gb_per_job_arch"])),
        split_directions=tuple(t.get("split_directions", [])),
        compile_jobs=int(t.get("compile_jobs", 0)),
        gb_mean_per_branch_job=float(t.get("gb_mean_per_branch_job", t.get("gb_mean_per_job_arch",
                                                                          t["gb_per_job_arch"]))),
        split_switches={d: tuple(v) for d, v in t.get("split_switches", {}).items()},
        gb_per_branch_job=float(t.get("gb_per_branch_job", 0.0)),
        drop_switches=tuple(t.get("drop_switches", [])),
    )


def parse_recipe(data: dict[str, Any], path: Path) -> Recipe:
    """Validate a recipe table; any problem is a UsageError naming the file and the field."""
    w = str(path)
    arch = _need(data, "arch", dict, w)
    jobs = _need(data, "jobs", dict, w)
    spec = ArchSpec(
        env=arch.get("env", ""),
        separator=arch.get("separator", ";"),
        by_major=dict(arch.get("by_major", {})),
        fmt=arch.get("format", "token"),
        arch_specific_from_major=arch.get("arch_specific_from_major"),
        min_nvcc=dict(arch.get("min_nvcc", {})),
        gencode=dict(arch.get("gencode", {})),
    )
    if spec.fmt not in ("token", "cc") or (spec.fmt == "token" and not spec.by_major):
        raise UsageError(f"{w} [arch]: format must be 'token' (with by_major) or 'cc'")
    return Recipe(
        package=_need(data, "package", str, w),
        version=_need(data, "version", str, w),
        import_name=_need(data, "import_name", str, w),
        sdist=data.get("sdist", ""),
        sha256=data.get("sha256", "").lower(),
        submodule_marker=_need(data, "submodule_marker", str, w),
        submodule_fix=_need(data, "submodule_fix", str, w),
        min_cuda=_need(data, "min_cuda", str, w),
        min_torch=_need(data, "min_torch", str, w),
        min_compute_capability=_need(data, "min_compute_capability", str, w),
        translation_units=_need(data, "translation_units", int, w),
        arch=spec,
        threads_env=jobs.get("threads_env", ""),
        max_threads=int(jobs.get("max_threads", 1)),
        fixed_threads=jobs.get("fixed_threads"),
        gb_per_job_arch=_need(jobs, "gb_per_job_arch", float, w + " [jobs]"),
        gb_mean_per_job_arch=float(jobs.get("gb_mean_per_job_arch", 0.0)),
        env={k: str(v) for k, v in data.get("env", {}).items()},
        subsets={n: _subset(n, t, w) for n, t in data.get("subset", {}).items()},
        extension=data.get("extension", ""),
        verify_info=bool(data.get("verify_info", False)),
        subdir=data.get("subdir", ""),
        path=path,
    )


def arch_token(recipe: Recipe, cc: str) -> str | None:
    """The package's name for a compute capability (flash-attn '90'; xformers '9.0a'), None if unsupported."""
    mm = major_minor(cc)
    if mm is None:
        return None
    if recipe.arch.fmt == "token":
        return recipe.arch.by_major.get(str(mm[0]))
    suffix = (
        "a"
        if recipe.arch.arch_specific_from_major is not None and mm[0] >= recipe.arch.arch_specific_from_major
        else ""
    )
    return f"{mm[0]}.{mm[1]}{suffix}"


def recipe_dir() -> Path:
    return data_dir("recipes")


def all_recipes(directory: Path | None = None) -> list[Recipe]:
    out = []
    for path in sorted((directory or recipe_dir()).glob("*.toml")):
        try:
            data = tomllib.loads(read_text(path, "rules"))
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"{path}: not valid TOML ({e})") from e
        out.append(parse_recipe(data, path))
    return out


def find_recipe(package: str, version: str | None = None, directory: Path | None = None) -> Recipe:
    """The recipe for package (newest pinned version when version is None); UsageError if there is none."""
    recipes = [r for r in all_recipes(directory) if r.package == package]
    if not recipes:
        raise UsageError(f"no recipe for '{package}'; known packages: {', '.join(PACKAGES)}")
    if version is None:
        from packaging.version import Version

        return max(recipes, key=lambda r: Version(r.version))
    for r in recipes:
        if r.version == version:
            return r
    known = ", ".join(r.version for r in recipes)
    raise UsageError(
        f"no recipe pins {package}=={version} (pinned: {known}); use --source PATH to build another version"
    )
