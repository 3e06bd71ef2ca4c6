"""`olmo-doctor env`: the recommended build/run flags alone, ready to eval in a shell."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from olmo_doctor.errors import UsageError

if TYPE_CHECKING:
    from olmo_doctor.envplan import EnvVar

FORMATS = ("bash", "fish", "dotenv", "json")


def format_env(env: dict[str, EnvVar], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({k: {"value": v.value, "reason": v.reason} for k, v in env.items()}, indent=2)
    lines = []
    for name, var in env.items():
        value = shlex.quote(var.value)
        lines.append({
            "bash": f"export {name}={value}  # {var.reason}",
            "fish": f"set -gx {name} {value}  # {var.reason}",
            "dotenv": f"{name}={value}",
        }[fmt])
    return "\n".join(lines)


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
        text = format_env(result.env, fmt)
        if text:
            typer.echo(text)
