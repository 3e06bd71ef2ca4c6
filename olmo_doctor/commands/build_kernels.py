"""`olmo-doctor build-kernels`: compile flash-attn / xformers for exactly this machine, cached and verified.

Flow per package: facts -> recipe -> plan (pure; `--dry-run` stops here) -> refuse on blockers -> a cached
wheel? install it : (source -> subset -> pip wheel with progress -> cache) -> install -> verify on the GPU.
Exit codes: 0 built/installed and verified, 1 refused or failed, 2 bad input.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from olmo_doctor.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console


class Package(str, Enum):
    flash_attn = "flash-attn"
    xformers = "xformers"
    flash_attn_3 = "flash-attn-3"
    all = "all"  # flash-attn and xformers (FlashAttention-3 needs --source, so it is asked for by name)


def register(app: typer.Typer) -> None:
    @app.command("build-kernels")
    def _cmd(
        package: Annotated[
            Package, typer.Option("--package", "-p", help="What to build.")
        ] = Package.flash_attn,
        version: Annotated[str | None, typer.Option(help="Pinned version (a recipe must exist).")] = None,
        source: Annotated[
            str | None, typer.Option(help="Build from this source folder or sdist file.")
        ] = None,
        subset: Annotated[str | None, typer.Option(help="Build only a model's kernels: 'olmo'.")] = None,
        jobs: Annotated[
            int | None, typer.Option("--jobs", "-j", min=1, help="Upper bound on MAX_JOBS.")
        ] = None,
        arch: Annotated[
            list[str] | None,
            typer.Option(
                help="Target compute capability instead of the GPUs here (repeatable), e.g. --arch 9.0."
            ),
        ] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")] = False,
        from_report: Annotated[
            str | None,
            typer.Option(help="Plan for the machine in this report (collect_env output); implies --dry-run."),
        ] = None,
        rebuild: Annotated[
            bool, typer.Option("--rebuild", help="Ignore a cached wheel and compile again.")
        ] = False,
        verify_gpu: Annotated[
            bool, typer.Option("--verify/--no-verify", help="Check the kernels on the GPU.")
        ] = True,
    ) -> None:
        """Compile flash-attn / xformers for exactly this GPU: planned, memory-safe, cached and verified."""
        code = run(
            package.value,
            version,
            source,
            subset,
            jobs,
            tuple(arch or ()),
            dry_run or bool(from_report),
            as_json,
            from_report,
            rebuild,
            verify_gpu,
        )
        raise typer.Exit(code)


def _check_recipes(found: list[Any], source: str | None, subset: str | None) -> None:
    for r in found:
        if r.needs_source and not source:
            raise UsageError(
                f"{r.package} has no sdist on PyPI; pass --source PATH to a git checkout with "
                f"submodules (git clone --recursive https://github.com/Dao-AILab/flash-attention)"
            )
    if subset is not None and not any(subset in r.subsets for r in found):
        known = {r.package: sorted(r.subsets) for r in found}
        raise UsageError(f"unknown subset '{subset}' (recipes define: {known})")


def _own_source(recipe: Any, source: str | None, dry_run: bool) -> str | None:
    """The --source to build from: None for the recipe's pinned sdist carried by hand (the same as a download,
    put in the sdist cache unless this is a dry run)."""
    if not (source and Path(source).is_file() and Path(source).name == recipe.sdist):
        return source
    from olmo_common.bounded.files import sha256_file
    from olmo_doctor.build.source import sdist_cache_dir

    if sha256_file(Path(source)) != recipe.sha256:
        return source
    cached = sdist_cache_dir() / recipe.sdist
    if not dry_run and not cached.exists():
        _cache_copy(Path(source), cached)
    return None


def _plans(
    packages: list[str],
    version: str | None,
    source: str | None,
    subset: str | None,
    jobs: int | None,
    archs: tuple[str, ...],
    from_report: str | None,
    dry_run: bool = False,
) -> list[Any]:
    from olmo_doctor.build import machine, plan, recipes
    from olmo_doctor.rules.engine import run_rules

    if len(packages) > 1 and (version or source):
        raise UsageError("--version and --source name one package; use --package flash-attn or xformers")
    found = [recipes.find_recipe(p, version) for p in packages]
    archs = _checked_request(source, archs, found)
    _check_recipes(found, source, subset)
    facts = machine.gather(from_report, replacing=() if dry_run else tuple(r.package for r in found))
    findings = run_rules(facts, scope="install")
    python = str(facts.get("python.executable") or ("python3" if from_report else sys.executable))
    return [(recipe, plan.plan_build(facts, recipe, _request(recipe, version, _own_source(recipe, source, dry_run),
                                                             subset, jobs, archs, python), findings))
            for recipe in found]


def _request(recipe: Any, version: str | None, src: str | None, subset: str | None, jobs: int | None,
             archs: tuple[str, ...], python: str) -> Any:
    """What to build of one recipe: from which source (fingerprinted), for which archs, with which Python."""
    from olmo_doctor.build import plan
    from olmo_doctor.build.source import fingerprint
    from olmo_doctor.resources import user_cache_dir

    source_id = fingerprint(Path(src).expanduser()) if src else None
    return plan.BuildRequest(
        package=recipe.package,
        version=version,
        source=src,
        source_id=source_id,
        source_sha256=source_id if src and Path(src).expanduser().is_file() else None,  # an archive's sha256
        subset=subset if subset in recipe.subsets else None,
        jobs=jobs,
        archs=archs,
        python=python,
        work_root=str(user_cache_dir()),
    )


def _print_dry_run(console: Console, plans: list[Any], as_json: bool) -> int:
    from olmo_doctor.build import render

    if as_json:
        print(json.dumps({"plans": [p.to_json() for _, p in plans]}, indent=1))
    else:
        for _, p in plans:
            render.print_plan(console, p)
    return 1 if any(not p.ok for _, p in plans) else 0


def _succeeded(outcome: dict[str, Any]) -> bool:
    return outcome["status"] in ("built", "cached") and outcome.get("verified", True) is not False


def run(
    package: str,
    version: str | None,
    source: str | None,
    subset: str | None,
    jobs: int | None,
    archs: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
    from_report: str | None,
    rebuild: bool,
    verify_gpu: bool,
) -> int:
    from rich.console import Console

    from olmo_doctor.build import render

    console = Console(stderr=as_json)
    packages = ["flash-attn", "xformers"] if package == "all" else [package]
    plans = _plans(packages, version, source, subset, jobs, archs, from_report, dry_run)
    if dry_run:
        return _print_dry_run(console, plans, as_json)
    outcomes = []
    for recipe, p in plans:
        if not p.ok:
            render.print_plan(console, p)
            outcomes.append(
                {"package": p.package, "status": "refused", "blockers": [f.to_json() for f in p.blockers]}
            )
            continue
        outcomes.append(_build_one(console, recipe, p, source, rebuild, verify_gpu))
    if as_json:
        print(json.dumps({"results": outcomes}, indent=1))
    return 0 if all(_succeeded(o) for o in outcomes) else 1


def _install_cached(console: Console, p: Any, cached: Path, python: str,
                    outcome: dict[str, Any]) -> dict[str, Any] | None:
    """Install a cached wheel into `outcome`; the failed outcome when pip refuses it."""
    import time

    from olmo_doctor.build import cache
    from olmo_doctor.render import plain

    start = time.monotonic()
    proc = cache.install(cached, python)
    if proc.returncode != 0:
        return {**outcome, "status": "failed", "error": proc.stderr.strip()[-500:]}
    outcome.update(status="cached", wheel=str(cached), install_s=round(time.monotonic() - start, 2))
    console.print(
        f"[green]✓[/green] {p.package} {p.version} installed from cache in "
        f"{outcome['install_s']:.1f} s ({plain(str(cached))})",
        highlight=False,
    )
    return None


def _prepare_source(console: Console, recipe: Any, p: Any, python: str, outcome: dict[str, Any]) -> Path:
    """The private source tree (copied or unpacked, the subset's edits made); returns the work folder."""
    import time

    from olmo_doctor.build import source as src_mod
    from olmo_doctor.build.subset import apply_subset

    phase_start = time.monotonic()
    work = Path(p.work_dir)
    local = p.source["kind"] == "path"
    tree = src_mod.prepare(recipe, p.source.get("location") if local else None, work, python,
                           sha256=p.source.get("sha256") if local else None)
    if p.subset:
        units = apply_subset(tree, recipe.subsets[p.subset], split=p.split_branches)
        console.print(f"  subset {p.subset}: {len(units)} files to compile", highlight=False)
    outcome["source_s"] = round(time.monotonic() - phase_start, 1)  # copy/unpack + subset edit
    return work


def _build_failed(console: Console, wall_s: float, log: Path, outcome: dict[str, Any]) -> dict[str, Any]:
    from olmo_doctor.build import execute
    from olmo_doctor.render import plain

    verdict = execute.explain_failure(log)
    console.print(f"[red]✗ build failed[/red] after {wall_s:.0f} s; full log: {plain(str(log))}")
    console.print(f"  {verdict['title']}\n  {verdict['message']}", highlight=False, markup=False)
    for cmd in verdict["fixes"]:
        console.print(f"  $ {cmd}", highlight=False, markup=False)
    return {**outcome, "status": "failed", "diagnosis": verdict}


def _compile(console: Console, recipe: Any, p: Any, python: str, verify_gpu: bool,
             outcome: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
    """Build, cache and install the wheel into `outcome`: (the failed outcome or None, the pending GPU check)."""
    import time

    from olmo_doctor.build import cache, execute, render
    from olmo_doctor.render import plain
    from olmo_doctor.resources import user_cache_dir

    render.print_plan(console, p)
    work = _prepare_source(console, recipe, p, python, outcome)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log = user_cache_dir() / "logs" / f"{p.package}-{p.version}-{stamp}.log"
    # the GPU check's set-up (torch, CUDA, SDPA warm-up) runs while the kernels compile; started once the
    # source is ready, so a source that fails to prepare leaves no check waiting
    pending = _start_check(recipe, p, python) if verify_gpu else None
    result = execute.run_plan(p, log, console)
    outcome.update(log=str(log), wall_s=round(result.wall_s, 1), timeline=result.timeline,
                   peak_rss_gb=round(result.peak_rss_gb, 2), predicted_peak_gb=p.predicted_peak_gb)
    if not result.ok:
        if pending:
            pending.cancel()
        return _build_failed(console, result.wall_s, log, outcome), None
    assert result.wheel is not None
    phase_start = time.monotonic()
    stored = cache.store(p, result.wheel, {"wall_s": result.wall_s, "peak_rss_gb": result.peak_rss_gb})
    proc = cache.install(stored, python)
    outcome["install_s"] = round(time.monotonic() - phase_start, 1)
    if proc.returncode != 0:
        if pending:
            pending.cancel()
        return {**outcome, "status": "failed", "error": proc.stderr.strip()[-500:]}, None
    _drop_work(work)  # objects are in the wheel now; the cache keeps the wheel
    outcome.update(status="built", wheel=str(stored))
    console.print(
        f"[green]✓[/green] built {plain(stored.name)} in {result.wall_s:.0f} s, peak RAM "
        f"{result.peak_rss_gb:.1f} GB (predicted {p.predicted_peak_gb:g} GB)",
        highlight=False,
    )
    return None, pending


def _build_one(
    console: Console, recipe: Any, p: Any, source: str | None, rebuild: bool, verify_gpu: bool
) -> dict[str, Any]:
    import time

    from olmo_doctor.build import cache

    python = p.argv[0]
    outcome: dict[str, Any] = {"package": p.package, "version": p.version, "cache_digest": p.cache_digest}
    cached, refused = (None, None) if rebuild else cache.find(p)
    if refused:  # a wheel we did not record, or whose bytes changed: never installed as "cached"
        console.print(f"! cached wheel refused: {refused}; rebuilding", highlight=False, markup=False)
        outcome["cache_refused"] = refused
    if cached is not None:
        failed, pending = _install_cached(console, p, cached, python, outcome), None
    else:
        failed, pending = _compile(console, recipe, p, python, verify_gpu, outcome)
    if failed is not None:
        return failed
    if verify_gpu:
        phase_start = time.monotonic()
        outcome["verified"] = _verify(console, recipe, p, python, pending)
        outcome["verify_s"] = round(time.monotonic() - phase_start, 1)
    return outcome


def _subset_dims(recipe: Any, p: Any) -> tuple[list[int], str]:
    """Head dims the build keeps (empty: all) and the text a call outside them must raise."""
    subset = recipe.subsets[p.subset] if p.subset else None
    dims = list(subset.head_dims) if subset else []
    # our flash-attn 2 and FlashAttention-3 transformations raise their own message; a recipe whose subset is
    # upstream's switches alone raises upstream's
    return dims, "olmo-doctor --subset" if subset and subset.transform in ("flash_attn_2", "flash_attn_3") else ""


def _start_check(recipe: Any, p: Any, python: str) -> Any:
    from olmo_doctor.build import verify

    if not p.gpus:
        return None
    try:
        return verify.PendingCheck(p.package, python, _subset_dims(recipe, p)[0])
    except OSError:
        return None  # the check then runs the plain way after the install


def _verify(console: Console, recipe: Any, p: Any, python: str, pending: Any = None) -> bool | None:
    from olmo_doctor.build import verify
    from olmo_doctor.render import plain

    if not p.gpus:
        console.print(
            "  [yellow]![/yellow] no GPU here: skipping the GPU check (run it on the target machine)"
        )
        return None
    dims, expect = _subset_dims(recipe, p)
    res = pending.finish(expect) if pending else verify.verify(p.package, python, dims, subset_text=expect)
    if not res.get("ok"):
        problems = "; ".join(map(str, res.get("problems", [])))
        console.print(f"[red]✗ GPU check failed[/red]: {plain(problems)}", highlight=False)
        if "gpu" in res:
            verify.record(res)
        return False
    path = verify.record(res)
    console.print(
        f"[green]✓[/green] fwd+bwd matches SDPA (max rel. error {res['max_rel_error']:.1e} <= "
        f"{res['rel_error_bound']:.0e}); {p.package} {res['kernel_ms']:.2f} ms vs SDPA "
        f"{res['sdpa_ms']:.2f} ms: {res['faster']} is faster on {res['gpu']} (recorded in {path})",
        highlight=False,
    )
    return True


def _cache_copy(src: Path, cached: Path) -> None:
    """`src` copied into the sdist cache under a fresh temp name, then renamed (olmo_common/atomic.py)."""
    from olmo_common.atomic import AtomicFile, shared_mode

    cached.parent.mkdir(parents=True, exist_ok=True)
    with AtomicFile(cached, shared_mode()) as f, open(src, "rb") as source:
        while chunk := source.read(1 << 20):
            f.write(chunk)


def _drop_work(work: Path) -> None:
    """Remove a build's work folder in olmo-doctor's cache (rmtree refuses a link there: nothing is followed)."""
    shutil.rmtree(work, ignore_errors=True)


def _checked_request(source: str | None, archs: tuple[str, ...], found: list[Any]) -> tuple[str, ...]:
    """UsageError for a --source or --arch that cannot be built from or for, before anything is planned; the
    --arch values as compute capabilities."""
    if source:
        path = Path(source).expanduser()
        _check_source(path, source)
        if path.is_dir():
            from olmo_doctor.build.source import check_tree

            for r in found:  # a folder without setup.py or submodules: said now, not after planning
                check_tree(path, r)
    return tuple(_checked_arch(a) for a in archs)


def _known_ccs() -> set[str]:
    """Every compute capability an NVIDIA GPU has (the GPU table), plus 10.1 (Thor before CUDA 13 renamed it)."""
    from olmo_doctor.compat.gpus import FAMILIES

    return {cc for _, _, patterns in FAMILIES for _, cc in patterns} | {"10.1"}


def _checked_arch(text: str) -> str:
    """An --arch value as 'M.m' (with its 'a'/'f' suffix): '9.0', '90', 'sm_90' and '9.0a' are understood; a
    capability no NVIDIA GPU has (banana, 0.0, 9.9) is a UsageError naming the real ones."""
    m = re.fullmatch(r"(?:sm_?|compute_)?(\d{1,2})(?:\.(\d))?([af]?)", text.strip().lower())
    if m and m.group(2) is None and len(m.group(1)) >= 2:  # '90', '120': flash-attn's spelling
        major, minor = m.group(1)[:-1], m.group(1)[-1]
    elif m and m.group(2) is not None:
        major, minor = m.group(1), m.group(2)
    else:
        major = minor = ""
    cc = f"{int(major)}.{minor}" if major else ""
    known = _known_ccs()
    if cc not in known:
        real = ", ".join(sorted(known, key=lambda c: tuple(map(int, c.split(".")))))
        raise UsageError(f"--arch {text!r} is not the compute capability of any NVIDIA GPU; give one like 9.0 "
                         f"(H100/H200) or 8.9 (L4, RTX 4090): {real}")
    return cc + (m.group(3) if m else "")


def _check_source(path: Path, given: str) -> None:
    """UsageError for a --source that cannot be a source: missing, not a folder or a regular file, an archive that
    is empty, not named .tar.gz/.tgz, not gzip data, or not a tar inside."""
    import tarfile

    if not path.exists():
        raise UsageError(f"--source {given}: no such file or folder")
    if path.is_dir():
        return  # its setup.py and submodules are checked for the package (build.source.check_tree)
    if not path.is_file():
        raise UsageError(f"--source {given} is not a regular file or folder; give a source folder or a .tar.gz sdist")
    if not path.name.endswith((".tar.gz", ".tgz")):
        raise UsageError(f"--source {given}: give a source folder or a .tar.gz sdist (this is neither)")
    with open(path, "rb") as f:
        head = f.read(2)
    if not head:
        raise UsageError(f"--source {given} is empty; download the sdist again")
    if head != b"\x1f\x8b":
        raise UsageError(f"--source {given} is not gzip data (its name says it is); download the sdist again")
    try:
        with tarfile.open(path, "r:gz") as tar:
            first = tar.next()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise UsageError(f"--source {given} is not a readable tar.gz ({e}); download the sdist again") from None
    if first is None:
        raise UsageError(f"--source {given} is an empty archive; download the sdist again")
