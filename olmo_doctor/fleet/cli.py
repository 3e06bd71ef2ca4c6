"""The command-line glue of `check --fleet` and `compare`: validate options, run, print on rank 0."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from olmo_doctor.api import DEVICES, SCOPES
from olmo_doctor.errors import UsageError
from olmo_doctor.fleet.verdict import FleetResult
from olmo_doctor.report import SIBLINGS


def _emitter(json_out: bool) -> Callable[[FleetResult], None]:
    def emit(result: FleetResult) -> None:
        from olmo_doctor.fleet.output import dumps, print_result

        if json_out:
            typer.echo(dumps(result))
        else:
            print_result(result)

    return emit


def _check_device(device: str | None) -> None:
    if device is not None and device not in DEVICES:
        raise UsageError(f"unknown device '{device}'; use one of {', '.join(DEVICES)}")


def check_fleet(scope: str, facts_from: Path | None, timeout: float, size_mb: float | None, json_out: bool,
                device: str | None = None) -> int:
    if scope not in SCOPES:
        raise UsageError(f"unknown scope '{scope}'; use one of {', '.join(SCOPES)}")
    _check_device(device)
    if not 1 <= timeout <= 3600:
        raise UsageError(f"--fleet-timeout {timeout:g} is out of range; give seconds between 1 and 3600")
    if size_mb is not None and not 0 < size_mb <= 16384:
        raise UsageError(f"--fleet-size-mb {size_mb:g} is out of range; give MiB between 1 and 16384")
    if facts_from is not None and not facts_from.is_dir():
        raise UsageError(f"--fleet-facts-from {facts_from} is not a folder of <node>.json reports")
    from olmo_doctor.fleet.launch import run

    return run(scope, facts_from, timeout, size_mb, _emitter(json_out), device)


def compare_reports(paths: list[Path], scope: str, json_out: bool, device: str | None = None) -> int:
    """`olmo-doctor compare`: the same table from saved reports, one node per report (its file name)."""
    from olmo_doctor.fleet.verdict import judge
    from olmo_doctor.fleet.world import safe_node_name
    from olmo_doctor.report import load_report

    if scope not in SCOPES:
        raise UsageError(f"unknown scope '{scope}'; use one of {', '.join(SCOPES)}")
    _check_device(device)
    files = expand(paths)
    if len(files) < 2:
        raise UsageError("compare needs at least two reports (one per node), e.g. olmo-doctor compare reports/*.json")
    nodes = {}
    for path in files:
        name = safe_node_name(path.stem if path.is_file() else path.name)
        while name in nodes:
            name += "_"
        nodes[name] = load_report(path)
    result = judge(nodes, scope=scope, source=f"{len(nodes)} reports", plan_device=device)
    _emitter(json_out)(result)
    return result.exit_code


def expand(paths: list[Path]) -> list[Path]:
    """Reports as given; a folder of several *.json reports, or of one capture folder per node, stands for one
    node per report."""
    out: list[Path] = []
    for p in paths:
        many = _nodes_in(p) if p.is_dir() else []
        out += many if len(many) > 1 else [p]
    return out


def _nodes_in(folder: Path) -> list[Path]:
    """The folder's *.json reports, else its capture folders when it is not one itself."""
    many = sorted(folder.glob("*.json"), key=_natural)
    if not many and not any((folder / n).is_file() for n in SIBLINGS):
        many = sorted((d for d in folder.iterdir() if d.is_dir()), key=_natural)
    return many


def _natural(path: Path) -> list[Any]:
    """node2 before node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]
