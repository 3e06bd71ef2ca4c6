"""`olmo-doctor compare REPORT...`: the cross-node table of `check --fleet` from reports saved on each node."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        reports: Annotated[
            list[Path], typer.Argument(help="One report per node (olmo-doctor report -o FILE), or a folder of them.")
        ],
        json_out: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
        scope: Annotated[str, typer.Option(help="install, train, or all: which rules judge each node.")] = "all",
        device: Annotated[
            str | None, typer.Option(help="Device the job trains on: cuda or cpu (default: cuda for train).")
        ] = None,
    ) -> None:
        """Line up reports from several nodes: odd versions marked, each node's findings; exit 1 on any error."""
        from olmo_doctor.fleet.cli import compare_reports

        raise typer.Exit(compare_reports(reports, scope, json_out, device))
