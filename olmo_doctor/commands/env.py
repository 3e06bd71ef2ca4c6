"""`olmo-doctor env`: the recommended build/run flags alone, ready to eval in a shell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from olmo_doctor.errors import UsageError
from olmo_doctor.shell import UnsafeValue, env_line

if TYPE_CHECKING:
    from olmo_doctor.envplan import EnvVar

FORMATS = ("bash", "fish", "dotenv", "json")


def format_env(env: dict[str, EnvVar], fmt: str) -> str:
    """The variables as one shell's lines (every value and comment through olmo_doctor.shell), or JSON."""
    if fmt == "json":
        return json.dumps({k: {"value": v.value, "reason": v.reason} for k, v in env.items()}, indent=2)
    lines = []
    for name, var in env.items():
        try:
            lines.append(env_line(name, var.value, var.reason, fmt))
        except UnsafeValue:  # the facts layer drops such values; never emit one as code
            lines.append(f"# {name} left out: its value holds a control character" if fmt != "dotenv" else "")
    return "\n".join(line for line in lines if line)


def register(app: typer.Typer) -> None:
    @app.command("env")
    def env(
        fmt: Annotated[str, typer.Option("--format", help="bash, fish, dotenv or json.")] = "bash",
        from_report: Annotated[Path | None, typer.Option("--from-report", help="Plan for another machine.")] = None,
    ) -> None:
        """Print the recommended environment (TORCH_CUDA_ARCH_LIST, MAX_JOBS, ...): eval "$(olmo-doctor env)"."""
        if fmt not in FORMATS:
            raise UsageError(f"unknown format '{fmt}'; use one of {', '.join(FORMATS)}")
        from olmo_doctor.api import run_check

        result = run_check(scope="install", from_report=from_report)
        refused = result.facts.get("facts.refused")
        if isinstance(refused, list) and refused:  # on stderr: stdout is for eval
            typer.echo("olmo-doctor: treated as unknown (values with control characters, bytes that are not "
                       "UTF-8, or too long): " + ", ".join(refused),
                       err=True)
        text = format_env(result.env, fmt)
        if text:
            typer.echo(text)
