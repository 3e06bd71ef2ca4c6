"""`olmo-doctor rules`: placeholder until its issue lands; exits 2 with a clear line."""

from __future__ import annotations

import typer

from olmo_doctor.errors import UsageError


def register(app: typer.Typer) -> None:
    @app.command("rules", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def _cmd() -> None:
        """(not available yet in this build)"""
        raise UsageError("'rules' is not available in this build yet")
