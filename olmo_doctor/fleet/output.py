"""The fleet verdict as text (one table, per-node health, the all-reduce tests, the fleet findings) and as one
JSON object. Node names and fact values are data from other machines: printed escaped, never as markup."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.markup import escape

from olmo_doctor.facts import with_defaults
from olmo_doctor.findings import Finding
from olmo_doctor.fleet.links import Test
from olmo_doctor.fleet.table import Row, show
from olmo_doctor.fleet.verdict import FleetResult
from olmo_doctor.render import MARK, finding_block

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
WIDE = 6  # up to this many nodes the table has a column per node; beyond, one line per row with the odd nodes


def _clean(text: str) -> str:
    """Text from other machines as plain text: no markup, no terminal control sequences."""
    return escape(CONTROL.sub("?", text))


def to_json(r: FleetResult) -> dict[str, Any]:
    return {
        "fleet": {"nodes": list(r.nodes), "ranks": r.ranks, "source": r.source, "scope": r.scope, **r.extra},
        "table": [{"key": row.key, "label": row.label, "strict": row.strict, "agrees": row.agrees,
                   "majority": row.majority, "odd": row.odd, "values": row.values} for row in r.rows],
        "health": {node: [f.to_json() for f in fs] for node, fs in r.health.items()},
        "allreduce": [t.to_json() for t in r.tests],
        "facts": {k: v for k, v in with_defaults(r.facts).items() if k.startswith("fleet.")},
        "findings": [f.to_json() for f in r.findings],
        "exit_code": r.exit_code,
    }


def dumps(r: FleetResult) -> str:
    return json.dumps(to_json(r), indent=2, default=str)


def _cell(row: Row, node: str, width: int) -> str:
    text = show(row.values[node])[: width - 2]
    mark = " ✗" if node in row.odd and row.strict else " !" if node in row.odd else ""
    return _clean(text) + mark + " " * max(1, width - len(text) - len(mark))


def _wide_table(console: Console, r: FleetResult, nodes: list[str]) -> None:
    """A column per node."""
    width = max(12, *(len(n) + 2 for n in nodes), *(min(24, len(show(v)) + 4) for row in r.rows
                                                     for v in row.values.values()))
    head = " " * 24 + "".join(n.ljust(width) for n in nodes)
    console.print(_clean(head.rstrip()), style="bold", overflow="ignore", crop=False)
    for row in r.rows:
        style = "" if row.odd else "dim"
        line = f"{row.key:<24}" + "".join(_cell(row, n, width) for n in nodes)
        console.print(line.rstrip(), style=style, overflow="ignore", crop=False)


def _long_table(console: Console, r: FleetResult, nodes: list[str]) -> None:
    """One line per row: the majority value, and the nodes that differ."""
    for row in r.rows:
        if row.agrees:
            console.print(f"[dim]{row.key:<24} {_clean(show(row.majority))} (all {len(nodes)} nodes)[/]")
            continue
        odd = ", ".join(f"{n}={show(row.values[n])}" for n in row.odd)
        mark = MARK["error"] if row.strict else MARK["warning"]
        console.print(f"{row.key:<24} {_clean(show(row.majority))}  {mark} {_clean(odd)}")


def _table(console: Console, r: FleetResult) -> None:
    nodes = list(r.nodes)
    (_wide_table if len(nodes) <= WIDE else _long_table)(console, r, nodes)
    console.print("[dim](✗ differs from the majority and must not; ! differs, worth a look; grey rows agree)[/]")


def _health(console: Console, r: FleetResult) -> None:
    console.print("\n[bold]Health per node[/]")
    healthy = [n for n, fs in r.health.items() if all(f.severity == "info" for f in fs)]
    if healthy:
        console.print(f" {MARK['ok']} {_clean(', '.join(healthy))}", overflow="fold")
    for node, found in r.health.items():
        _node_health(console, node, [f for f in found if f.severity != "info"])


def _node_health(console: Console, node: str, shown: list[Finding]) -> None:
    if not shown:
        return
    worst = "error" if any(f.severity == "error" for f in shown) else "warning"
    console.print(f" {MARK[worst]} {_clean(node)}")
    for f in shown:
        console.print(f"     {MARK[f.severity]} {f.code} {_clean(f.title)}", overflow="fold")


def _verdict(t: Test) -> str:
    if t.hang:
        return "[red]hung[/]"
    if t.error:
        return f"[red]failed: {_clean(t.error)}[/]"
    return f"[yellow]slow: {_clean(t.slow)}[/]" if t.slow else "[green]ok[/]"


def _gbps(value: float | None) -> str:
    return f"{value:g}" if value is not None else "-"


def _tests(console: Console, r: FleetResult) -> None:
    if not r.tests:
        return
    console.print(f"\n[bold]All-reduce[/] (busbw in GB/s, nccl-tests definition; backend {r.tests[0].backend})")
    console.print(f" {'test':<28}{'ranks':>6}{'MiB':>7}{'busbw':>9}{'expect':>9}  link / verdict", style="bold")
    for t in r.tests:
        link = _clean(t.link) + " · " if t.link else ""
        console.print(f" {_clean(t.name):<28}{t.ranks:>6}{t.size_mb:>7g}{_gbps(t.busbw_gbps):>9}"
                      f"{_gbps(t.expected_gbps):>9}  {link}{_verdict(t)}", overflow="fold")


def _findings(console: Console, findings: list[Finding]) -> None:
    for f in findings:
        console.print()
        for line in finding_block(f):
            console.print(line, overflow="fold")


def _print_verdict(console: Console, r: FleetResult) -> None:
    errors = sum(f.severity == "error" for f in r.findings)
    bad_nodes = [n for n, fs in r.health.items() if any(f.severity == "error" for f in fs)]
    console.print()
    if r.exit_code == 1:
        where = f" on {', '.join(bad_nodes)}" if bad_nodes else ""
        console.print(f"[red bold]✗ {errors} fleet problem(s); node errors{_clean(where) or ': none'}[/]")
    else:
        console.print("[green bold]✓ The nodes agree and no node has errors.[/]")


def print_result(r: FleetResult, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=False)
    ranks = f", {sum(r.ranks.values())} ranks" if r.tests else ""
    console.print(f"[bold]olmo-doctor fleet[/] · {len(r.nodes)} nodes{ranks} · {_clean(r.source)} · scope {r.scope}")
    _table(console, r)
    _health(console, r)
    _tests(console, r)
    _findings(console, r.findings)
    _print_verdict(console, r)
