"""`olmo-doctor rules`: list the rules database."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("rules")
    def rules(json_out: Annotated[bool, typer.Option("--json", help="Print the rules as JSON.")] = False) -> None:
        """List every rule: code, severity, cause, scope and title."""
        from olmo_doctor.rules.model import load_rules

        loaded = load_rules()
        if json_out:
            typer.echo(json.dumps([
                {"code": r.code, "name": r.name, "cause": r.cause, "severity": r.severity,
                 "unplanned_severity": r.unplanned_severity, "consequence_of": list(r.consequence_of),
                 "scope": list(r.scopes),
                 "title": r.title, "when": r.when, "signatures": [s.pattern.pattern for s in r.signatures],
                 "fixes": [{"title": f.title, "applicability": f.applicability} for f in r.fixes],
                 "sources": list(r.sources)} for r in loaded], indent=2))
            return
        for r in loaded:
            typer.echo(f"{r.code}  {r.severity:<7}  {r.cause:<28} {r.name}")
        typer.echo(f"\n{len(loaded)} rules. olmo-doctor explain CODE shows one.")
