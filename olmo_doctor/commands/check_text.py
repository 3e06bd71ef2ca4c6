"""The human form of `check`: summary per area, findings with fixes, recommended environment, verdict."""

from __future__ import annotations

from rich.console import Console

from olmo_doctor import __version__
from olmo_doctor.api import CheckResult
from olmo_doctor.findings import Finding, consequences, roots
from olmo_doctor.render import AREAS, MARK, area_lines, area_status, finding_block, not_judged_line, plain
from olmo_doctor.shell import UnsafeValue, comment, env_line

_RANK = {"error": 0, "warning": 1, "info": 2}
_GOAL = {"install": "building kernels", "train": "training", "all": "building kernels or training"}


def _unsaid(lines: dict[str, str]) -> bool:
    return any("?" in line for line in lines.values())


def _print_areas(console: Console, result: CheckResult, status: dict[str, str], verbose: bool) -> None:
    """One line per area, then what a report left unsaid and (verbose) where each fact was read."""
    lines = area_lines(result.facts)
    for area in AREAS:
        console.print(f" {MARK[status[area]]} [bold]{area:<12}[/] {plain(lines[area])}", overflow="fold")
    if result.from_report and _unsaid(lines):
        console.print("   [dim]? = the report does not say; checks that need it were skipped[/]")
    groups = result.extra.get("not_judged")
    if isinstance(groups, dict) and groups:
        console.print(f"   [dim]could not judge: {plain(not_judged_line(groups))}[/]", overflow="fold")
    sources = result.extra.get("sources")
    if verbose and isinstance(sources, dict) and sources:
        _print_sources(console, result, sources)


def _print_sources(console: Console, result: CheckResult, sources: dict[str, object]) -> None:
    console.print("   [dim]read from the report:[/]")
    for key, src in sorted(sources.items()):
        if isinstance(src, dict):
            console.print(f"   [dim]  {plain(key)} = {plain(str(result.facts.get(key)))}  (line {src.get('line')}: "
                          f"{plain(str(src.get('text', ''))[:100])})[/]", overflow="fold")


def _worst(findings: list[Finding]) -> dict[str, str]:
    """Root code -> the worst severity among itself and what follows from it (a root counts with that)."""
    return {f.code: min((g.severity for g in [f, *consequences(findings, f)]), key=_RANK.__getitem__)
            for f in roots(findings)}


def _print_finding(console: Console, findings: list[Finding], finding: Finding) -> None:
    for line in finding_block(finding):
        console.print(line, overflow="fold")
    # what follows from this root cause: one line each, fixed by fixing the root
    for sub in consequences(findings, finding):
        console.print(f"    ↳ {MARK[sub.severity]} {sub.code} {plain(sub.title)} "
                      f"[dim](follows from {finding.code}; "
                      f"olmo-doctor explain {sub.code})[/]", overflow="fold")
    console.print()


def _print_findings(console: Console, findings: list[Finding], worst: dict[str, str], verbose: bool) -> None:
    """Root findings in full (infos too when verbose), then the rest of the infos on one line each."""
    top = roots(findings)
    shown = [f for f in top if verbose or worst[f.code] != "info"]
    if shown:
        console.print()
    for finding in shown:
        _print_finding(console, findings, finding)
    for finding in top:
        if worst[finding.code] == "info" and not verbose:
            console.print(f" {MARK['info']} {finding.code} {plain(finding.title)} "
                          f"[dim](olmo-doctor explain {finding.code})[/]")


def _print_env(console: Console, result: CheckResult) -> None:
    if not result.env:
        return
    console.print("\n[bold]Recommended environment[/] (eval \"$(olmo-doctor env)\" or olmo-doctor fix --apply):")
    for name, var in result.env.items():
        try:
            line = env_line(name, var.value, var.reason)
        except UnsafeValue:
            continue  # the facts layer drops such values; never print one as a command
        console.print(f"  [cyan]{plain(line)}[/]", overflow="fold")


def _print_refused(console: Console, result: CheckResult) -> None:
    dropped = result.facts.get("facts.refused")
    if isinstance(dropped, list) and dropped:
        note = comment("unknown: values with control characters, bytes that are not UTF-8, or too long were "
                       "refused: " + ", ".join(dropped))
        console.print(f"\n[dim]{plain(note)}[/]", overflow="fold")


def _print_verdict(console: Console, result: CheckResult, worst: dict[str, str], status: dict[str, str]) -> None:
    top = roots(result.findings)
    errors = sum(worst[f.code] == "error" for f in top)
    warnings = sum(worst[f.code] == "warning" for f in top)
    console.print()
    if errors:
        tail = f", {warnings} warning(s)" if warnings else ""
        console.print(f"[red bold]✗ {errors} problem(s) must be fixed[/]{tail}. "
                      "Run [bold]olmo-doctor fix[/] to see what can be fixed for you.")
    elif warnings:
        console.print(f"[yellow]! No blocking problems; {warnings} warning(s) worth a look.[/]")
    else:
        unknown = [area for area in AREAS if status[area] == "unknown"]
        tail = f" as far as the report shows ({', '.join(unknown)}: not stated)" if unknown else ""
        console.print(f"[green bold]✓ Ready.[/] Nothing blocks {_GOAL[result.scope]}{tail}.")


def print_result(result: CheckResult, verbose: bool = False, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=False)
    source = f"report {plain(str(result.from_report))}" if result.from_report else "this machine"
    console.print(f"[bold]olmo-doctor {__version__}[/] · {source} · scope {result.scope} · "
                  f"{result.elapsed_s:.2f} s")
    status = area_status(result.findings, result.facts)
    _print_areas(console, result, status, verbose)
    worst = _worst(result.findings)
    _print_findings(console, result.findings, worst, verbose)
    _print_env(console, result)
    _print_refused(console, result)
    _print_verdict(console, result, worst, status)
