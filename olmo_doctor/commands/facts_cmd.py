"""`olmo-doctor facts`: the raw facts the probes gathered, or the documented key vocabulary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from olmo_doctor.facts import FACT_KEYS, with_defaults


def register(app: typer.Typer) -> None:
    @app.command("facts")
    def facts(
        keys: Annotated[bool, typer.Option("--keys", help="List every fact key with its meaning.")] = False,
        from_report: Annotated[Path | None, typer.Option("--from-report", help="Facts parsed from a report.")] = None,
        deep: Annotated[bool, typer.Option(help="Include the slower deep probes.")] = False,
    ) -> None:
        """Print the facts about this machine as JSON (the vocabulary rules are written in)."""
        if keys:
            width = max(map(len, FACT_KEYS))
            for key, meaning in FACT_KEYS.items():
                typer.echo(f"{key:<{width}}  {meaning}")
            return
        from olmo_doctor.api import gather_facts

        typer.echo(json.dumps(with_defaults(gather_facts(from_report, deep=deep)), indent=2, default=str))
