"""`olmo-doctor fix`: show (default) or apply the fixes the rules carry; journal, roll back and undo them.

    olmo-doctor fix                      # dry run: each fix, its grade and the exact changes
    olmo-doctor fix --apply              # run the safe fixes, then re-check
    olmo-doctor fix --apply --unsafe-fixes --only OD207
    olmo-doctor fix --undo [ID]          # put back what a run changed (the latest by default)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from olmo_doctor.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from olmo_doctor.api import CheckResult
    from olmo_doctor.fix.journal import Entry
    from olmo_doctor.fix.plan import FixPlan
    from olmo_doctor.fix.recheck import EnvLines, Recheck


def _project(project: Path | None) -> Path:
    from olmo_doctor.fix.safety import state_dir

    path = (project or Path.cwd()).resolve()
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise UsageError(f"project dir {path} {what}; pass --project DIR")
    state_dir(path)  # .olmo-doctor must be our own real folder before anything reads or writes through it
    return path


def _code_ok(code: str) -> bool:
    return code.lower() == "env" or (code.upper().startswith("OD") and code[2:].isdigit())


def _well_formed(codes: list[str], only: str) -> None:
    bad = [c for c in codes if not _code_ok(c)]
    if not codes or bad:
        raise UsageError(f"--only takes rule codes like OD204 (or 'env' for the recommended exports), not "
                         f"{', '.join(bad) or repr(only)}")


def _codes(only: str | None) -> list[str] | None:
    if only is None:
        return None
    codes = [c.strip() for c in only.split(",") if c.strip()]
    _well_formed(codes, only)
    known = _known_codes()
    unknown = [c for c in codes if c.lower() != "env" and c.upper() not in known]
    if unknown:
        raise UsageError(f"--only {', '.join(unknown)}: no such rule; `olmo-doctor rules` lists them")
    return codes


def _known_codes() -> set[str]:
    """The codes of the rules database the check judges with (what --only may name)."""
    from olmo_doctor.rules.model import load_rules

    return {r.code for r in load_rules()}


def _echo(console: Console) -> Callable[[str], None]:
    """Stream a command's output lines, dimmed and indented (never parsed as markup: pip prints [brackets])."""
    return lambda line: console.print("    " + line, style="dim", markup=False, highlight=False, overflow="fold")


def _read_env_file(path: Path) -> str | None:
    """The project's env file, or None. A symlink, a FIFO or device, or a hard link there is refused (one line):
    fix --apply replaces this file and copies it into its journal, and must do neither through another name."""
    from olmo_doctor.fix.pins import read_regular

    data = read_regular(path, "env file")
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise UsageError(f"cannot read {path} ({e}); fix --apply rewrites it, so move it away or repair it"
                         ) from None


def _emit(data: dict[str, Any]) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _latest_live(journal: Any) -> str | None:
    """The latest run that still has something to undo (None: the journal is empty)."""
    from olmo_doctor.fix import execute

    live = [i for i in journal.ids() if journal.load(i, verify=False).status not in execute.DONE]
    if journal.ids() and not live:
        raise UsageError(f"every run in {journal.root} is already undone or rolled back; nothing to undo")
    return live[-1] if live else None


def _undo(project: Path, entry_id: str | None, json_out: bool) -> int:
    from rich.console import Console

    from olmo_doctor.fix import execute, render
    from olmo_doctor.fix.journal import Journal

    journal = Journal(project)
    if entry_id is None:
        entry_id = _latest_live(journal)
    entry = journal.load(journal.resolve(entry_id))
    console = Console(highlight=False, stderr=json_out)
    entry = execute.undo(entry, journal, project, echo=None if json_out else _echo(console))
    if json_out:
        _emit({"mode": "undo", "journal": entry.id, "status": entry.status,
               "problems": entry.data.get("undo_problems", []), "files": [f["path"] for f in entry.data["files"]],
               "restore_steps": [s["argv"] for s in entry.data.get("restore_steps", [])]})
    else:
        render.print_undo(entry, console)
    return 0 if entry.status == "undone" else 1


def _history(project: Path, json_out: bool) -> int:
    from rich.console import Console

    from olmo_doctor.fix import render
    from olmo_doctor.fix.journal import Journal, JournalError

    journal = Journal(project)
    rows = []
    for entry_id in journal.ids():
        try:
            data = journal.load(entry_id, verify=False).data  # the manifest checksum; undo checks the backups
            rows.append({"id": entry_id, "status": data["status"], "created": data["created"],
                         "codes": sorted({c for i in data["plan"] for c in i.get("codes", [])}),
                         "summary": "; ".join(i["description"] for i in data["plan"])})
        except JournalError as e:
            rows.append({"id": entry_id, "status": "tampered", "summary": str(e)})
    if json_out:
        _emit({"mode": "history", "project": str(project), "entries": rows})
    else:
        render.history_rows(rows, Console(highlight=False))
    return 0


def register(app: typer.Typer) -> None:
    @app.command("fix")
    def fix(
        entry_id: Annotated[str | None, typer.Argument(metavar="[ID]", help="With --undo: the journal entry "
                                                       "(id, unique prefix or number; default the latest).")] = None,
        apply: Annotated[bool, typer.Option("--apply", help="Run the safe fixes (default: only show them).")] = False,
        unsafe_fixes: Annotated[bool, typer.Option(
            "--unsafe-fixes", help="Also run unsafe fixes (reinstall torch, rebuild kernels, pip outside a venv)."
        )] = False,
        only: Annotated[str | None, typer.Option(
            "--only", metavar="CODE[,CODE]", help="Only these findings ('env' = the recommended exports).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
        undo: Annotated[bool, typer.Option("--undo", help="Undo a journaled run (the latest, or ID).")] = False,
        history: Annotated[bool, typer.Option("--history", help="List the journaled runs.")] = False,
        from_report: Annotated[Path | None, typer.Option(
            "--from-report", help="Plan for another machine from its report (dry run only).")] = None,
        project: Annotated[Path | None, typer.Option(
            "--project", metavar="DIR", help="Where .olmo-doctor/ (env.sh, journal) lives (default: cwd).")] = None,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show whole env file diffs.")] = False,
    ) -> None:
        """Show the fixes for this machine's findings; --apply runs them (journaled, undoable)."""
        if entry_id is not None and not undo:
            raise UsageError(f"'{entry_id}': a journal ID only goes with --undo (olmo-doctor fix --undo {entry_id})")
        if undo and (apply or only or from_report or history):
            raise UsageError("--undo takes only an optional ID (and --json, --project)")
        if from_report is not None and apply:
            raise UsageError("--from-report is for a dry run; run `olmo-doctor fix --apply` on that machine")
        root = _project(project)
        if undo:
            raise typer.Exit(_undo(root, entry_id, json_out))
        if history:
            raise typer.Exit(_history(root, json_out))
        raise typer.Exit(_fix(root, apply=apply, unsafe=unsafe_fixes, only=_codes(only), json_out=json_out,
                              from_report=from_report, verbose=verbose))


@dataclass
class _FixRun:
    """One `fix` invocation's judged state: the check, the plan, the env-file lines a re-check would apply."""

    result: CheckResult
    plan: FixPlan
    lines: EnvLines | None
    env_path: Path
    console: Console
    json_out: bool

    @property
    def exit_code(self) -> int:
        return 1 if self.result.has_errors else 0


def _prepare(project: Path, *, unsafe: bool, only: list[str] | None, json_out: bool,
             from_report: Path | None) -> _FixRun:
    from rich.console import Console

    from olmo_doctor import api
    from olmo_doctor.fix import pyenv
    from olmo_doctor.fix.envfile import ENV_FILE
    from olmo_doctor.fix.plan import make_plan
    from olmo_doctor.fix.recheck import env_lines, trusted_lines

    result = api.run_check(from_report=from_report)
    env = None if from_report else pyenv.query(pyenv.target_python())
    env_path = project / ENV_FILE
    env_text = _read_env_file(env_path) if not from_report else None
    plan = make_plan(result.findings, result.env, dict(result.facts), project=str(project), env=env,
                     env_text=env_text, unsafe=unsafe, only=only,
                     from_report=str(from_report) if from_report else None)
    console = Console(highlight=False, stderr=json_out)
    # what the re-check after --apply would apply of env.sh: olmo-doctor's own journaled lines only
    env_after = next((i.content for i in plan.to_run if i.op == "write_env_file"), env_text)
    lines = env_lines(env_after, trusted_lines(project, plan)) if not from_report else None
    return _FixRun(result, plan, lines, env_path, console, json_out)


def _show(run: _FixRun, verbose: bool) -> int:
    """The dry run: the plan, and what a re-check would apply of the env file."""
    from olmo_doctor.fix import render

    if run.json_out:
        _emit({"mode": "dry-run", **run.plan.to_json(), "recheck_env": run.lines.to_json() if run.lines else None})
    else:
        render.print_plan(run.plan, run.console, verbose, env_lines=run.lines)
    return run.exit_code


def _nothing_to_apply(run: _FixRun) -> int:
    from olmo_doctor.fix import execute, render

    execute.refuse_held_back(run.plan)  # pip fixes held back outside a venv still refuse (exit 2)
    if run.json_out:
        _emit({"mode": "apply", **run.plan.to_json(), "journal": None, "steps": [], "status": "nothing_to_do"})
    else:
        render.print_apply(run.plan, None, None, run.console)
    return run.exit_code


def _recheck(run: _FixRun, project: Path, entry: Entry) -> Recheck:
    """Judge the machine again after a run applied, as if the env file were sourced; kept in the journal."""
    from olmo_doctor import api
    from olmo_doctor.fix.recheck import recheck, trusted_lines

    rc = recheck([f.code for f in run.result.findings], lambda: api.run_check().findings,
                 _read_env_file(run.env_path), trusted_lines(project, run.plan))
    entry.data["recheck"] = rc.to_json()
    entry.save()
    return rc


def _apply(run: _FixRun, project: Path, unsafe: bool, only: list[str] | None, verbose: bool) -> int:
    from olmo_doctor.fix import execute, render

    plan, console = run.plan, run.console
    if not run.json_out:
        render.print_plan(plan, console, verbose, applying=True, env_lines=run.lines)
        console.print()
    argv = ["olmo-doctor", "fix", "--apply", *(["--unsafe-fixes"] if unsafe else []),
            *(["--only", ",".join(only)] if only else []), "--project", str(project)]
    entry = execute.apply_plan(plan, project, argv, echo=None if run.json_out else _echo(console),
                               progress=None if run.json_out else lambda item: render.print_step(item, console))
    rc = _recheck(run, project, entry) if entry.status == "applied" else None
    if run.json_out:
        _emit(_applied_json(run, entry, rc))
    else:
        render.print_apply(plan, entry, rc, console)
    if entry.status != "applied":
        return 1
    return 1 if rc is not None and rc.has_errors else 0


def _applied_json(run: _FixRun, entry: Any, rc: Any) -> dict[str, Any]:
    """`fix --apply --json`: the plan, what the journaled run did, and the check after it."""
    return {"mode": "apply", **run.plan.to_json(), "journal": entry.id, "journal_path": str(entry.shown),
            "status": entry.status, "error": entry.data.get("error"), "steps": entry.data["steps"],
            "rollback_problems": entry.data.get("rollback_problems"),
            "recheck": rc.to_json() if rc else None, "recheck_env": run.lines.to_json() if run.lines else None}


def _fix(project: Path, *, apply: bool, unsafe: bool, only: list[str] | None, json_out: bool,
         from_report: Path | None, verbose: bool) -> int:
    run = _prepare(project, unsafe=unsafe, only=only, json_out=json_out, from_report=from_report)
    if not apply:
        return _show(run, verbose)
    if not run.plan.to_run:
        return _nothing_to_apply(run)
    return _apply(run, project, unsafe, only, verbose)
