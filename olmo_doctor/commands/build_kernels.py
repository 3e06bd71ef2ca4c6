"""`olmo-doctor build-kernels`: compile flash-attn / xformers for exactly this machine, cached and verified.

Flow per package: facts -> recipe -> plan (pure; `--dry-run` stops here) -> refuse on blockers -> a cached
wheel? install it : (source -> subset -> pip wheel with progress -> cache) -> install -> verify on the GPU.
Exit codes: 0 built/installed and verified, 1 refused or failed, 2 bad input.
"""

from __future__ import annotations

import json
import os
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
    from olmo_doctor.build.source import fingerprint
    from olmo_doctor.resources import user_cache_dir
    from olmo_doctor.rules.engine import run_rules

    if len(packages) > 1 and (version or source):
        raise UsageError("--version and --source name one package; use --package flash-attn or xformers")
    found = [recipes.find_recipe(p, version) for p in packages]
    for r in found:
        if r.needs_source and not source:
            raise UsageError(
                f"{r.package} has no sdist on PyPI; pass --source PATH to a git checkout with "
                f"submodules (git clone --recursive https://github.com/Dao-AILab/flash-attention)"
            )
    if subset is not None and not any(subset in r.subsets for r in found):
        known = {r.package: sorted(r.subsets) for r in found}
        raise UsageError(f"unknown subset '{subset}' (recipes define: {known})")
    if source and not Path(source).expanduser().exists():
        raise UsageError(f"--source {source}: no such file or folder")
    facts = machine.gather(from_report)
    findings = run_rules(facts, scope="install")
    out = []
    for recipe in found:
        src = source
        if src and Path(src).is_file() and Path(src).name == recipe.sdist:
            from olmo_doctor.build.source import sdist_cache_dir, sha256_of

            if sha256_of(Path(src)) == recipe.sha256:  # the pinned sdist carried by hand: same as a download
                cached = sdist_cache_dir() / recipe.sdist
                if not dry_run and not cached.exists():
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, cached.with_suffix(".part"))
                    os.replace(cached.with_suffix(".part"), cached)
                src = None
        source_id = fingerprint(Path(src).expanduser()) if src else None
        request = plan.BuildRequest(
            package=recipe.package,
            version=version,
            source=src,
            source_id=source_id,
            source_sha256=source_id if src and Path(src).expanduser().is_file() else None,  # an archive's sha256
            subset=subset if subset in recipe.subsets else None,
            jobs=jobs,
            archs=archs,
            python=str(facts.get("python.executable") or ("python3" if from_report else sys.executable)),
            work_root=str(user_cache_dir()),
        )
        out.append((recipe, plan.plan_build(facts, recipe, request, findings)))
    return out


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
        if as_json:
            print(json.dumps({"plans": [p.to_json() for _, p in plans]}, indent=1))
        else:
            for _, p in plans:
                render.print_plan(console, p)
        return 1 if any(not p.ok for _, p in plans) else 0
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
    return (
        0
        if all(o["status"] in ("built", "cached") and o.get("verified", True) is not False for o in outcomes)
        else 1
    )


def _build_one(
    console: Console, recipe: Any, p: Any, source: str | None, rebuild: bool, verify_gpu: bool
) -> dict[str, Any]:
    import time

    from olmo_doctor.build import cache, execute, render
    from olmo_doctor.build import source as src_mod
    from olmo_doctor.build.subset import apply_subset
    from olmo_doctor.render import plain
    from olmo_doctor.resources import user_cache_dir

    python = p.argv[0]
    outcome: dict[str, Any] = {"package": p.package, "version": p.version, "cache_digest": p.cache_digest}
    cached, refused = (None, None) if rebuild else cache.find(p)
    if refused:  # a wheel we did not record, or whose bytes changed: never installed as "cached"
        console.print(f"! cached wheel refused: {refused}; rebuilding", highlight=False, markup=False)
        outcome["cache_refused"] = refused
    pending = None
    if cached is not None:
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
    else:
        render.print_plan(console, p)
        phase_start = time.monotonic()
        work = Path(p.work_dir)
        tree = src_mod.prepare(
            recipe, p.source.get("location") if p.source["kind"] == "path" else None, work, python,
            sha256=p.source.get("sha256") if p.source["kind"] == "path" else None,
        )
        if p.subset:
            units = apply_subset(tree, recipe.subsets[p.subset], split=p.split_branches)
            console.print(f"  subset {p.subset}: {len(units)} files to compile", highlight=False)
        outcome["source_s"] = round(time.monotonic() - phase_start, 1)  # copy/unpack + subset edit
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log = user_cache_dir() / "logs" / f"{p.package}-{p.version}-{stamp}.log"
        # the GPU check's set-up (torch, CUDA, SDPA warm-up) runs while the kernels compile; started once the
        # source is ready, so a source that fails to prepare leaves no check waiting
        pending = _start_check(recipe, p, python) if verify_gpu else None
        result = execute.run_plan(p, log, console)
        outcome.update(
            log=str(log),
            wall_s=round(result.wall_s, 1),
            timeline=result.timeline,
            peak_rss_gb=round(result.peak_rss_gb, 2),
            predicted_peak_gb=p.predicted_peak_gb,
        )
        if not result.ok:
            if pending:
                pending.cancel()
            verdict = execute.explain_failure(log)
            console.print(f"[red]✗ build failed[/red] after {result.wall_s:.0f} s; full log: {plain(str(log))}")
            console.print(f"  {verdict['title']}\n  {verdict['message']}", highlight=False, markup=False)
            for cmd in verdict["fixes"]:
                console.print(f"  $ {cmd}", highlight=False, markup=False)
            return {**outcome, "status": "failed", "diagnosis": verdict}
        assert result.wheel is not None
        phase_start = time.monotonic()
        stored = cache.store(p, result.wheel, {"wall_s": result.wall_s, "peak_rss_gb": result.peak_rss_gb})
        proc = cache.install(stored, python)
        outcome["install_s"] = round(time.monotonic() - phase_start, 1)
        if proc.returncode != 0:
            if pending:
                pending.cancel()
            return {**outcome, "status": "failed", "error": proc.stderr.strip()[-500:]}
        shutil.rmtree(work, ignore_errors=True)  # objects are in the wheel now; the cache keeps the wheel
        outcome.update(status="built", wheel=str(stored))
        console.print(
            f"[green]✓[/green] built {plain(stored.name)} in {result.wall_s:.0f} s, peak RAM "
            f"{result.peak_rss_gb:.1f} GB (predicted {p.predicted_peak_gb:g} GB)",
            highlight=False,
        )
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
