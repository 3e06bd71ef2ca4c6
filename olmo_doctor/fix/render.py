"""The human form of `olmo-doctor fix`: the plan (dry run), what an apply did, an undo, the journal history."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.console import Console

from olmo_doctor.fix.envfile import BEGIN, END, ENV_FILE, HEADER
from olmo_doctor.fix.journal import Entry
from olmo_doctor.fix.plan import FixPlan, PlanItem
from olmo_doctor.fix.recheck import EnvLines, Recheck
from olmo_doctor.render import plain

GRADE = {"safe": "[green]safe  [/]", "unsafe": "[yellow]unsafe[/]", "manual": "[blue]manual[/]"}
STATUS_NOTE = {"done": "[dim]done[/]", "needs_unsafe": "[yellow]held back[/]", "needs_venv": "[red]held back[/]",
               "blocked": "[red]blocked[/]"}


def _argv(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _boilerplate(line: str) -> bool:
    """Markers, header and comment lines: the dry run shows the statements, -v shows everything."""
    return line in (BEGIN, END, *HEADER) or line.startswith("#") or not line.strip()


def _print_diff(console: Console, item: PlanItem, verbose: bool, pad: str) -> None:
    """The env-file lines the fix writes (statements only, 12 at most, unless verbose) and its pip command."""
    diff = item.diff if verbose else [ln for ln in item.diff if not _boilerplate(ln[1:])]
    shown = diff if verbose else diff[:12]
    for line in shown:
        color = "green" if line.startswith("+") else "red"
        console.print(f"{pad}[{color}]{plain(line)}[/]", overflow="fold")
    if len(shown) < len(diff):
        console.print(f"{pad}[dim]… {len(diff) - 12} more lines (-v or --json show them all)[/]")
    if item.argv:
        console.print(f"{pad}[cyan]$ {plain(_argv(item.argv))}[/]", overflow="fold")


def _item(console: Console, item: PlanItem, verbose: bool, width: int) -> None:
    grade = GRADE.get(item.applicability, item.applicability)
    codes = ", ".join(item.codes)
    note = STATUS_NOTE.get(item.status, "")
    console.print(f" {grade} [bold]{codes:<{width}}[/] {plain(item.description)} {note}", overflow="fold")
    pad = " " * (width + 9)
    if item.reason and item.status != "apply":
        console.print(f"{pad}[dim]{plain(item.reason)}[/]", overflow="fold")
    if item.status in ("apply", "needs_unsafe", "needs_venv"):
        _print_diff(console, item, verbose, pad)
    if item.status in ("manual", "blocked"):
        for cmd in item.commands:
            console.print(f"{pad}[cyan]$ {plain(cmd)}[/]", overflow="fold")


def print_env_lines(lines: EnvLines, console: Console) -> None:
    """Which lines of the env file the re-check after --apply applies (olmo-doctor's own), and which it leaves
    alone because olmo-doctor did not write them (a project's own file is data: never sourced for you)."""
    if not lines.applies and not lines.ignored:
        return
    console.print(f"\nRe-check after --apply applies these lines of {ENV_FILE}: "
                  + (", ".join(plain(s) for s in lines.applies) if lines.applies else "none"), overflow="fold")
    if lines.ignored:
        console.print(f"[yellow]Not applied[/] (olmo-doctor did not write them; read them before you source the "
                      f"file): {', '.join(plain(s) for s in lines.ignored)}", overflow="fold")


def _print_totals(plan: FixPlan, console: Console) -> None:
    """What --apply would run, what stays held back or manual, and how to apply."""
    run, held, manual = plan.count("apply"), plan.count("needs_unsafe"), plan.count("manual")
    there = " there" if plan.from_report else ""
    parts = [f"{run} fix(es) would run{there} with --apply" if run else "nothing left to apply"]
    parts += [f"{held} more with --unsafe-fixes"] if held else []
    parts += [f"{manual} manual (run those yourself)"] if manual else []
    console.print("; ".join(parts) + ".")
    if plan.count("needs_venv"):
        console.print("[red]pip changes are held back: not in a virtual environment.[/]")
    if run and not plan.from_report:
        flags = " --unsafe-fixes" if plan.unsafe else ""
        console.print(f"Run [bold]olmo-doctor fix --apply{flags}[/] to apply; every change is journaled and "
                      "[bold]olmo-doctor fix --undo[/] reverts it.")


def _heading(plan: FixPlan, applying: bool) -> str:
    """olmo-doctor fix · mode · the project (or report) · the target Python and its kind."""
    where = f"report {plan.from_report}" if plan.from_report else plan.project
    env = f" ({plan.env_kind})" if plan.env_kind else ""
    mode = "applying" if applying else "dry run"
    python = "" if plan.from_report else f" · python {plain(str(plan.python))}{env}"
    return f"[bold]olmo-doctor fix[/] · {mode} · {plain(where)}{python}"


def print_plan(plan: FixPlan, console: Console, verbose: bool = False, applying: bool = False,
               env_lines: EnvLines | None = None) -> None:
    console.print(_heading(plan, applying))
    if not plan.items:
        console.print("\n[green]✓ Nothing to fix:[/] no finding carries a fix, and there is no environment to "
                      "write.")
        return
    console.print()
    width = max(10, *(len(", ".join(i.codes)) for i in plan.items))
    for item in plan.items:
        _item(console, item, verbose, width)
    if env_lines is not None:
        print_env_lines(env_lines, console)
    if not applying:
        console.print()
        _print_totals(plan, console)


def why_left(plan: FixPlan, codes: list[str]) -> str:
    """For findings still present: what kept their fix from running."""
    reason = {"needs_unsafe": "needs --unsafe-fixes", "needs_venv": "needs a venv", "manual": "manual fix",
              "blocked": "blocked", "done": "fix in place; still fires", "apply": "fix applied; still fires"}
    selected = {f["code"] for f in plan.findings}
    out = []
    for code in codes:
        states = [i.status for i in plan.items if code in i.codes]
        if plan.only is not None and code not in selected:
            out.append(f"{code} (not in --only)")
            continue
        out.append(f"{code} ({reason.get(states[0], states[0]) if states else 'no fix'})")
    return ", ".join(out)


def print_step(item: PlanItem, console: Console) -> None:
    console.print(f"[bold]→ {', '.join(item.codes)}[/] {plain(item.description)}", overflow="fold")


def _print_nothing_to_apply(plan: FixPlan, console: Console) -> None:
    done, held = plan.count("done"), plan.count("needs_unsafe")
    console.print("[green]✓ Nothing to apply.[/] "
                  + (f"{done} fix(es) already in place. " if done else "")
                  + (f"{held} unsafe fix(es) held back (--unsafe-fixes). " if held else ""))


def _print_steps(plan: FixPlan, entry: Entry, console: Console) -> None:
    """One line per fix that was to run: done, failed, or not reached."""
    by_id = {s["item"]: s for s in entry.data["steps"]}
    for item in plan.to_run:
        step = by_id.get(item.id)
        if step is None:
            console.print(f" [dim]·[/] {plain(item.description)} [dim](not run)[/]")
            continue
        mark = "[green]✓[/]" if step.get("ok") else "[red]✗[/]"
        changes = ", ".join(step.get("changes") or [])
        console.print(f" {mark} {', '.join(item.codes)}  {plain(item.description)}"
                      + (f"  [dim]{plain(changes)}[/]" if changes else ""), overflow="fold")


def _print_failure(data: dict[str, Any], console: Console) -> None:
    console.print(f"\n[red]✗ {plain(str(data.get('error', 'failed')))}[/]", overflow="fold")
    problems = data.get("rollback_problems") or []
    if problems:
        console.print("[red]Rollback incomplete:[/] " + plain("; ".join(problems)))
    else:
        console.print("Rolled back everything this run did; the project and the venv are as before.")


def _writes_env_file(plan: FixPlan) -> bool:
    return any(i.op == "write_env_file" for i in plan.to_run)


def _recheck_line(plan: FixPlan, rc: Recheck) -> str:
    line = "Re-check" + (f" (as if {ENV_FILE} were sourced)" if _writes_env_file(plan) else "") + ": "
    line += f"[green]fixed {', '.join(rc.gone)}[/]" if rc.gone else "no finding went away"
    if rc.remaining:
        line += f"; still present: {plain(why_left(plan, rc.remaining))}"
    if rc.new:
        line += f"; [yellow]new: {', '.join(rc.new)}[/]"
    return line + "."


def print_apply(plan: FixPlan, entry: Entry | None, rc: Recheck | None, console: Console) -> None:
    if entry is None:
        _print_nothing_to_apply(plan, console)
        return
    data = entry.data
    console.print(f"\n[bold]Applied[/] · journal {entry.id} ({plain(str(entry.shown))})" if data["status"] ==
                  "applied" else f"\n[bold red]Failed[/] · journal {entry.id} ({plain(str(entry.shown))})")
    _print_steps(plan, entry, console)
    if data["status"] != "applied":
        _print_failure(data, console)
        return
    if rc is not None:
        console.print("\n" + _recheck_line(plan, rc))
    if _writes_env_file(plan):
        path = ENV_FILE if Path(plan.project) == Path.cwd().resolve() else str(Path(plan.project) / ENV_FILE)
        console.print(f"Next: [bold]source {plain(shlex.quote(path))}[/] in each shell that builds or trains.")
    console.print(f"Undo: [bold]olmo-doctor fix --undo {entry.id}[/]")


def print_undo(entry: Entry, console: Console) -> None:
    data = entry.data
    if data["status"] == "undone":
        files = ", ".join(f["path"] for f in data["files"]) or "no files"
        steps = len(data.get("restore_steps", []))
        console.print(f"[green]✓ Undid fix {entry.id}:[/] restored {plain(files)}"
                      + (f"; {steps} pip command(s) put the packages back" if steps else "")
                      + ("; pip freeze is identical to before" if data.get("freeze_before") else "") + ".")
    else:
        console.print(f"[red]✗ Undo of {entry.id} incomplete:[/] " + plain("; ".join(data.get("undo_problems", []))))


def history_rows(rows: list[dict[str, Any]], console: Console) -> None:
    if not rows:
        console.print("No fix journal in this project.")
        return
    for row in rows:
        console.print(f" {row['id']}  {row['status']:<18} {', '.join(row.get('codes', []))}  "
                      f"[dim]{plain(row.get('summary', ''))}[/]", overflow="fold")
