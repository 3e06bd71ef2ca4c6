"""Judging timed all-reduce tests: what each link should carry, and which node or link is slow.

busbw is nccl-tests' bus bandwidth (algbw * 2(n-1)/n for all-reduce), comparable with a link's bandwidth per
direction whatever the number of ranks. Expectations: inside a node the slowest GPU's NVLink (links up x 25 GB/s)
or PCIe link; between nodes each rank's share of the node's active RDMA bandwidth (rate / 8 / ranks), capped by
the GPU's PCIe link. A test is slow below 40% of its expectation (healthy runs reach ~75%: OD012), or, when no
expectation is known (NCCL over sockets), below half the median of its peers of the same kind. gloo on CPUs is
timed and shown, never judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from olmo_doctor.facts import FactValue, gpu_indices
from olmo_doctor.nccl.probe import NVLINK_GBPS_PER_LINK, PCIE_GBPS

SLOW_EFFICIENCY = 0.4
SLOW_VS_PEERS = 0.5


@dataclass
class Test:
    """One timed all-reduce: over all ranks ('all'), the ranks of one node ('node') or of two nodes ('pair')."""

    kind: str
    nodes: list[str]
    ranks: int
    backend: str = ""
    size_mb: float = 0.0
    busbw_gbps: float | None = None
    expected_gbps: float | None = None
    link: str | None = None
    error: str | None = None
    hang: bool = False
    slow: str | None = None  # why it is slow, when it is
    efficiency: float | None = field(default=None)

    @property
    def name(self) -> str:
        if self.kind == "all":
            return f"all {self.ranks} ranks"
        if self.kind == "node":
            return f"within {self.nodes[0]}"
        return " <-> ".join(self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


def _ints(facts: Mapping[str, FactValue], keys: list[str]) -> list[int] | None:
    values = [facts.get(k) for k in keys]
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return ints if ints and len(ints) == len(values) else None


def pcie(facts: Mapping[str, FactValue]) -> tuple[str | None, float | None]:
    """(label, GB/s per direction) of the node's slowest GPU PCIe link."""
    gpus = list(gpu_indices(facts))
    gens = _ints(facts, [f"gpu.{i}.pcie.gen_max" for i in gpus])
    widths = _ints(facts, [f"gpu.{i}.pcie.width" for i in gpus])
    if gens and widths and all(g in PCIE_GBPS for g in gens):
        gbps, label = min((PCIE_GBPS[g] * w / 16, f"PCIe Gen{g} x{w}") for g, w in zip(gens, widths, strict=True))
        return label, gbps
    return None, None


def intra_node(facts: Mapping[str, FactValue]) -> tuple[str | None, float | None]:
    """(label, GB/s per direction) of the slowest GPU link inside a node, from its health facts."""
    ups = _ints(facts, [f"gpu.{i}.nvlink.up" for i in gpu_indices(facts)])
    if ups and min(ups) > 0:
        return f"NVLink x{min(ups)}", min(ups) * NVLINK_GBPS_PER_LINK
    return pcie(facts)


def inter_node(facts: Mapping[str, FactValue], ranks_on_node: int) -> tuple[str | None, float | None]:
    """(label, GB/s per rank) a node's active RDMA ports give each of its ranks; never more than a GPU's PCIe
    link carries, since GPUDirect RDMA traffic crosses it."""
    rate, ports = facts.get("ib.active_rate_gbps"), facts.get("ib.active_ports")
    if not isinstance(rate, (int, float)) or not rate or not isinstance(ports, int):
        return None, None
    share = float(rate) / 8 / max(1, ranks_on_node)
    label, bus = pcie(facts)
    if bus is not None and bus < share:
        return f"{label} to {ports} RDMA ports", bus
    return f"RDMA {ports} ports, {rate:g} Gb/s", share


def _links(test: Test, nodes: Mapping[str, Mapping[str, FactValue]],
           ranks: Mapping[str, int]) -> list[tuple[str | None, float | None]]:
    """(label, GB/s) of each link the test crosses: inside its node, or each node's share of its RDMA ports."""
    facts = [nodes.get(n, {}) for n in test.nodes]
    if len(facts) == 1:
        return [intra_node(facts[0])]
    return [inter_node(f, ranks.get(n, 1)) for n, f in zip(test.nodes, facts, strict=True)]


def expect(test: Test, nodes: Mapping[str, Mapping[str, FactValue]], ranks: Mapping[str, int]) -> None:
    """Fill the test's link label and expected busbw (None when the facts do not say)."""
    if test.backend == "gloo":
        return  # CPU all-reduce over TCP: no hardware figure to hold it to
    found = _links(test, nodes, ranks)
    if found and all(g is not None for _, g in found):
        label, gbps = min(found, key=lambda lg: lg[1] or 0.0)
        test.link, test.expected_gbps = label, round(float(gbps or 0.0), 1)
    elif found:
        test.link = _first_label(found)


def _first_label(found: list[tuple[str | None, float | None]]) -> str | None:
    return next((label for label, _ in found if label), None)


def _against_link(t: Test) -> None:
    if t.busbw_gbps is None or not t.expected_gbps:
        return
    t.efficiency = round(t.busbw_gbps / t.expected_gbps, 3)
    if t.efficiency < SLOW_EFFICIENCY:
        t.slow = (f"{t.busbw_gbps:g} GB/s busbw is {t.efficiency:.0%} of the {t.expected_gbps:g} GB/s "
                  f"{t.link} should carry")


def _measured_on_hardware(t: Test, kind: str) -> bool:
    """A test of this kind with a bandwidth measured over NCCL (not gloo)."""
    return t.kind == kind and t.busbw_gbps is not None and t.backend != "gloo"


def _against_peers(tests: list[Test], kind: str) -> None:
    # gloo on CPUs shares cores between the ranks of a test: its timings say nothing about a link
    peers = [t for t in tests if _measured_on_hardware(t, kind)]
    if len(peers) < 3:
        return
    median = statistics.median(t.busbw_gbps or 0.0 for t in peers)
    for t in peers:
        if t.slow is None and (t.busbw_gbps or 0.0) < SLOW_VS_PEERS * median:
            t.slow = f"{t.busbw_gbps:g} GB/s busbw against a median of {median:g} GB/s for its peers"


def judge(tests: list[Test]) -> None:
    """Mark slow tests: against their link's expectation, else against the median of their own kind."""
    for t in tests:
        _against_link(t)
    for kind in ("node", "pair"):
        _against_peers(tests, kind)


def _slow_in_every_pair(node: str, pairs: list[Test]) -> bool:
    mine = [t for t in pairs if node in t.nodes]
    return len(mine) >= 2 and all(t.slow for t in mine)


def slow_nodes(tests: list[Test]) -> list[str]:
    """Nodes to blame: slow inside themselves, or slow in every pair they are in (at least two) while other
    pairs are fine; a slow pair with no such node is a slow link."""
    blamed = [t.nodes[0] for t in tests if t.kind == "node" and t.slow]
    pairs = [t for t in tests if t.kind == "pair" and t.busbw_gbps is not None]
    if any(not t.slow for t in pairs):
        paired = {n for t in pairs for n in t.nodes}
        blamed += [n for n in paired if n not in blamed and _slow_in_every_pair(n, pairs)]
    return sorted(blamed)


def findings_lines(tests: list[Test]) -> list[str]:
    """One line per slow node or slow link, for the fleet.slow fact."""
    nodes = slow_nodes(tests)
    lines = [f"node {n}: " + "; ".join(f"{t.name}: {t.slow}" for t in tests if t.slow and n in t.nodes)
             for n in nodes]
    for t in tests:
        if t.slow and not any(n in nodes for n in t.nodes):
            lines.append(f"{t.name}: {t.slow}")
    return lines
