"""The human form of `check`: summary per area, findings with fixes, recommended environment, verdict."""

from __future__ import annotations

from rich.console import Console

from olmo_doctor import __version__
from olmo_doctor.api import CheckResult
from olmo_doctor.findings import consequences, roots
from olmo_doctor.render import AREAS, MARK, area_lines, area_status, finding_block, plain
from olmo_doctor.shell import UnsafeValue, comment, env_line


def print_result(result: CheckResult, verbose: bool = False, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=False)
    source = f"report {plain(str(result.from_report))}" if result.from_report else "this machine"
    console.print(f"[bold]olmo-doctor {__version__}[/] · {source} · scope {result.scope} · "
                  f"{result.elapsed_s:.2f} s")
    lines, status = area_lines(result.facts), area_status(result.findings, result.facts)
    for area in AREAS:
        console.print(f" {MARK[status[area]]} [bold]{area:<12}[/] {plain(lines[area])}", overflow="fold")
    if result.from_report and any("?" in line for line in lines.values()):
        console.print("   [dim]? = the report does not say; checks that need it were skipped[/]")
    top = roots(result.findings)
    rank = {"error": 0, "warning": 1, "info": 2}
    # a root counts with the worst severity among itself and what follows from it
    worst = {f.code: min((g.severity for g in [f, *consequences(result.findings, f)]), key=rank.__getitem__)
             for f in top}
    shown = [f for f in top if verbose or worst[f.code] != "info"]
    infos = [f for f in top if worst[f.code] == "info" and not verbose]
    if shown:
        console.print()
        for finding in shown:
            for line in finding_block(finding):
                console.print(line, overflow="fold")
            # what follows from this root cause: one line each, fixed by fixing the root
            for sub in consequences(result.findings, finding):
                console.print(f"    ↳ {MARK[sub.severity]} {sub.code} {plain(sub.title)} "
                              f"[dim](follows from {finding.code}; "
                              f"olmo-doctor explain {sub.code})[/]", overflow="fold")
            console.print()
    for finding in infos:
        console.print(f" {MARK['info']} {finding.code} {plain(finding.title)} "
                      f"[dim](olmo-doctor explain {finding.code})[/]")
    if result.env:
        console.print("\n[bold]Recommended environment[/] (eval \"$(olmo-doctor env)\" or olmo-doctor fix --apply):")
        for name, var in result.env.items():
            try:
                line = env_line(name, var.value, var.reason)
            except UnsafeValue:
                continue  # the facts layer drops such values; never print one as a command
            console.print(f"  [cyan]{plain(line)}[/]", overflow="fold")
    dropped = result.facts.get("facts.refused")
    if isinstance(dropped, list) and dropped:
        refused = ", ".join(dropped)
        note = comment("unknown: values with control characters or too long were refused: " + refused)
        console.print(f"\n[dim]{plain(note)}"
                      "[/]", overflow="fold")
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
        goal = {"install": "building kernels", "train": "training", "all": "building kernels or training"}
        unknown = [area for area in AREAS if status[area] == "unknown"]
        tail = f" as far as the report shows ({', '.join(unknown)}: not stated)" if unknown else ""
        console.print(f"[green bold]✓ Ready.[/] Nothing blocks {goal[result.scope]}{tail}.")
