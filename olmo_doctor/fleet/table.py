"""The cross-node table: per node the facts that must agree, the majority value, and the nodes that differ.

A value a node does not have (None) counts as a value of its own: a node without flash-attn among nodes with it
is the odd one. With no majority (two nodes, or a 2-2 split) every disagreeing node is marked and none is blamed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from olmo_doctor.facts import FACT_KEYS, Facts, FactValue, gpu_indices

# The facts that must agree across the nodes of one job. STRICT: a difference breaks or skews training (error);
# ADVISORY: worth knowing, often harmless (warning). Derived keys (gpu.model, nvlink.up) are computed below.
STRICT: dict[str, str] = {
    "driver.version": "NVIDIA driver",
    "torch.version": "torch",
    "torch.cuda": "CUDA of torch",
    "torch.nccl": "NCCL of torch",
    "torch.cudnn": "cuDNN of torch",
    "python.version": "Python",
    "flash_attn.version": "flash-attn",
    "flash_attn.import_ok": "flash-attn loads",
    "xformers.version": "xformers",
    "torchao.version": "torchao",  # precision fp8: a node without it (or with another) fails or multiplies apart
    "torchao.import_ok": "torchao loads",
    "gpu.model": "GPUs",
}
ADVISORY: dict[str, str] = {
    "nvcc.version": "nvcc",
    "glibc.version": "glibc",
    "os.kernel": "kernel",
    "nvlink.up": "NVLink links up",
    "ib.active_ports": "RDMA ports active",
    "ib.active_rate_gbps": "RDMA Gb/s",
    "ulimit.memlock.soft": "ulimit -l",
    **{k: k.split(".", 1)[1] for k in FACT_KEYS if k.startswith("env.NCCL_")},
}


def _model(facts: Mapping[str, FactValue]) -> str | None:
    """'8x NVIDIA H100 80GB HBM3' (a count per model), 'none' without a GPU, None when the facts do not say."""
    names = [str(facts.get(f"gpu.{i}.name")) for i in gpu_indices(facts)]
    if names:
        return ", ".join(f"{names.count(n)}x {n}" for n in dict.fromkeys(names))
    return "none" if facts.get("gpu.count") == 0 else None


def derived(facts: Mapping[str, FactValue]) -> Facts:
    """Per-node values the table compares that no single fact holds: the GPU model and count, NVLink links up."""
    ups = [u for u in (facts.get(f"gpu.{i}.nvlink.up") for i in gpu_indices(facts)) if isinstance(u, int)]
    return {"gpu.model": _model(facts), "nvlink.up": sum(ups) if ups else None}


@dataclass
class Row:
    key: str
    label: str
    strict: bool
    values: dict[str, FactValue]
    majority: FactValue = None
    odd: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.odd


def _key(value: FactValue) -> str:
    return repr(value)  # lists are not hashable; repr keeps 1 and '1' apart


def row(key: str, label: str, strict: bool, values: dict[str, FactValue]) -> Row:
    r = Row(key, label, strict, values)
    counts = Counter(_key(v) for v in values.values())
    if len(counts) <= 1:
        r.majority = next(iter(values.values()), None)
        return r
    (top, n_top), (_, n_next) = counts.most_common(2)
    if n_top > n_next:
        r.majority = next(v for v in values.values() if _key(v) == top)
        r.odd = [node for node, v in values.items() if _key(v) != top]
    else:  # no majority: every node is part of the disagreement
        r.odd = list(values)
    return r


def build(nodes: Mapping[str, Mapping[str, FactValue]]) -> list[Row]:
    """One row per fact that must agree, skipping rows every node leaves unknown."""
    full = {node: {**facts, **derived(facts)} for node, facts in nodes.items()}
    rows = []
    for keys, strict in ((STRICT, True), (ADVISORY, False)):
        for key, label in keys.items():
            values = {node: f.get(key) for node, f in full.items()}
            if all(v is None for v in values.values()):
                continue
            rows.append(row(key, label, strict, values))
    return rows


def show(value: FactValue) -> str:
    """A value for a table cell or a finding line; control characters from a report never reach the terminal."""
    if value is None:
        return "-"
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text) or "-"


def describe(r: Row) -> str:
    """One line naming the odd nodes and values: 'node2 has torch.version 2.10.0 (the others: 2.11.0)'."""
    if r.majority is not None or (r.odd and len(r.odd) < len(r.values)):
        odd = ", ".join(f"{n} ({show(r.values[n])})" for n in r.odd)
        verb = "differs" if len(r.odd) == 1 else "differ"
        return f"{r.key}: {odd} {verb} from the others ({show(r.majority)})"
    return f"{r.key}: no majority: " + ", ".join(f"{n}={show(v)}" for n, v in r.values.items())
