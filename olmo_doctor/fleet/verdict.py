"""The fleet verdict: per-node findings (every rule on each node's facts), the cross-node table, the all-reduce
tests, and the `fleet.*` facts the fleet rules (OD330-OD334) judge. Pure: `compare` and `check --fleet` share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from olmo_doctor.facts import Facts
from olmo_doctor.findings import Finding, exit_code
from olmo_doctor.fleet import links, table
from olmo_doctor.rules.engine import run_rules


@dataclass
class FleetResult:
    nodes: dict[str, Facts]
    ranks: dict[str, int]
    rows: list[table.Row]
    health: dict[str, list[Finding]]
    tests: list[links.Test]
    facts: Facts
    findings: list[Finding]
    scope: str = "all"
    source: str = "live"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        every = self.findings + [f for fs in self.health.values() for f in fs]
        return exit_code(every)


def _odd(rows: list[table.Row], strict: bool) -> list[str]:
    return [table.describe(r) for r in rows if r.strict == strict and not r.agrees]


def fleet_facts(rows: list[table.Row], tests: list[links.Test]) -> Facts:
    """What the fleet rules read: odd facts (strict and advisory), slow nodes or links, hangs and failures."""
    return {
        "fleet.nodes": len(rows[0].values) if rows else None,
        "fleet.odd": _odd(rows, strict=True),
        "fleet.odd_minor": _odd(rows, strict=False),
        "fleet.slow": links.findings_lines(tests),
        "fleet.hang": [t.name for t in tests if t.hang],
        "fleet.error": [f"{t.name}: {t.error}" for t in tests if t.error and not t.hang],
    }


def _health(nodes: Mapping[str, Facts], scope: str, plan_device: str | None) -> dict[str, list[Finding]]:
    """Every rule on each node's facts. As `check --scope train` does: a training check is about a GPU run unless
    --device or a node's facts say otherwise; --device wins over what a saved report planned."""
    plan = plan_device or ("cuda" if scope == "train" else None)
    return {node: run_rules({**facts, "plan.device": plan_device or facts.get("plan.device") or plan,
                             "plan.fleet": len(nodes) > 1}, scope=scope)
            for node, facts in nodes.items()}


def judge(nodes: Mapping[str, Facts], ranks: Mapping[str, int] | None = None, tests: list[links.Test] | None = None,
          scope: str = "all", source: str = "live", log: str = "", plan_device: str | None = None) -> FleetResult:
    """The verdict over the nodes. `plan_device` (--device): the device the job trains on, which each node's
    health check judges for, as `check --device` does; every node is marked part of a job of several nodes."""
    ranks = dict(ranks or {n: 1 for n in nodes})
    tests = list(tests or [])
    for t in tests:
        links.expect(t, nodes, ranks)
    links.judge(tests)
    rows = table.build(nodes)
    health = _health(nodes, scope, plan_device)
    facts = fleet_facts(rows, tests)
    findings = run_rules(facts, scope=scope)
    if log and (facts["fleet.hang"] or facts["fleet.error"]):
        findings += _diagnose(log, {f.code for f in findings})
    return FleetResult(dict(nodes), ranks, rows, health, tests, facts, findings, scope, source)


def _diagnose(log: str, seen: set[str]) -> list[Finding]:
    """As `check --nccl` does: name the cause of a failed or hung collective from its error text."""
    try:
        from olmo_doctor.diagnose import diagnose_text
    except ImportError:
        return []
    return [f for f in diagnose_text(log)[:2] if f.code not in seen]
