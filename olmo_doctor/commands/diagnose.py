"""`olmo-doctor diagnose [FILE|-] [--report FILE | --here] [--json]`: the root cause of a failure log.

Exit codes: 1 when a cause is found (a cause line in the log, or a problem the machine facts show), 0 when none
is (symptom lines alone do not name a cause), 2 when the input cannot be read (missing, empty or binary file)
or the options are wrong.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from olmo_doctor.errors import UsageError


def _facts(report: Path | None, here: bool, log: str) -> dict:
    if report is not None and here:
        raise UsageError("give either --report FILE (another machine) or --here (this machine), not both")
    if report is not None:
        from olmo_doctor.report import load_report

        return dict(load_report(report))
    if here:
        from olmo_doctor.api import gather_facts

        return dict(gather_facts())
    if log != "-":
        # an issue's log often carries the machine's collect_env output too: its facts weigh in the ranking
        from olmo_doctor.report import facts_in_log

        return dict(facts_in_log(Path(log)))
    return {}


def register(app: typer.Typer) -> None:
    @app.command("diagnose")
    def diagnose_cmd(
        log: Annotated[
            str, typer.Argument(help="The failure log: a file (plain or .gz), or - for standard input.")
        ] = "-",
        report: Annotated[
            Path | None,
            typer.Option("--report", help="Facts of the failing machine: collect_env output or olmo-doctor report."),
        ] = None,
        here: Annotated[
            bool, typer.Option("--here", help="Use this machine's facts (the log came from here).")
        ] = False,
        json_out: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
    ) -> None:
        """Name the root cause of a failed build, import or training run from its log; exit 1 when found."""
        from olmo_doctor.diagnose import diagnose
        from olmo_doctor.diagnose.reader import iter_chunks

        if log == "-" and sys.stdin.isatty():
            raise UsageError("give a log file, or pipe one in: pip install ... 2>&1 | olmo-doctor diagnose -")
        facts = _facts(report, here, log)
        name = "standard input" if log == "-" else log
        diag = diagnose(iter_chunks(log), facts)
        if json_out:
            from olmo_doctor.diagnose.output import to_json

            typer.echo(json.dumps(to_json(diag), indent=2, default=str))
        else:
            from olmo_doctor.diagnose.output import print_text

            print_text(diag, name)
        raise typer.Exit(1 if diag.found else 0)
