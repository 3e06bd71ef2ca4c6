"""Conditions on CUDA_VISIBLE_DEVICES: GPUs it hides from CUDA, entries CUDA ignores."""

from __future__ import annotations

import re
from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue


def visible_entries(value: str, count: int) -> tuple[list[str], list[str]]:
    """(entries CUDA uses, entries it ignores) of CUDA_VISIBLE_DEVICES=value on a machine with `count` GPUs: it
    reads entries up to the first one that is invalid or out of range ('' and '-1' hide every GPU), and a
    repeated index hides them all (torch.cuda._parse_visible_devices mirrors this); UUID and MIG entries are
    taken as valid."""
    tokens = [t.strip() for t in value.split(",")]
    used: list[str] = []
    for i, token in enumerate(tokens):
        valid = (re.fullmatch(r"\d+", token) is not None and int(token) < count) or token.startswith(("GPU-", "MIG-"))
        if not valid:
            return used, tokens[i:]
        if token in used:
            return [], tokens
        used.append(token)
    return used, []


def visible_gpu_count(value: str, count: int) -> int:
    """How many GPUs the CUDA runtime sees under CUDA_VISIBLE_DEVICES=value (see visible_entries)."""
    return len(visible_entries(value, count)[0])


@fact_check
def gpus_hidden(facts: Mapping[str, FactValue]) -> Context:
    """The driver sees GPUs, CUDA_VISIBLE_DEVICES hides all of them, and the plan is not a CPU run."""
    value, count = facts.get("env.CUDA_VISIBLE_DEVICES"), facts.get("gpu.count")
    if not isinstance(value, str) or not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    seen = _torch_sees(facts)
    if facts.get("plan.device") == "cpu" or seen > 0:
        return None  # torch's own count, when the worker saw one, beats parsing the value
    if visible_gpu_count(value, count) > 0 and not (seen == 0 and _names_nothing_checkable(value, facts)):
        return None
    return {"visible_value": repr(value)}


# what CUDA's runtime says when CUDA_VISIBLE_DEVICES leaves it no device (cudaErrorNoDevice), or torch says for it
_NO_DEVICE = re.compile(r"no CUDA-capable device|No CUDA GPUs are available|Error 100\b", re.I)


def _names_nothing_checkable(value: str, facts: Mapping[str, FactValue]) -> bool:
    """The entries CUDA would use are GPU UUIDs or MIG names (the parse cannot check them against the machine),
    and torch, asked, found no device at all for the reason an empty selection gives: they name no GPU here."""
    used, _ = visible_entries(value, 1 << 30)
    error = facts.get("torch.cuda_init_error")
    no_device = not error or (isinstance(error, str) and bool(_NO_DEVICE.search(error)))
    return bool(used) and all(t.startswith(("GPU-", "MIG-")) for t in used) and no_device


def _torch_sees(facts: Mapping[str, FactValue]) -> int:
    seen = facts.get("torch.cuda_device_count")
    return seen if isinstance(seen, int) and not isinstance(seen, bool) else -1


def _gpu_count(count: FactValue) -> int | None:
    """A GPU count of one or more (not a yes/no), else None."""
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None


@fact_check
def visible_devices_entries_ignored(facts: Mapping[str, FactValue]) -> Context:
    """CUDA_VISIBLE_DEVICES holds an entry that names no GPU: CUDA ignores it and every entry after it, so fewer
    GPUs are used than the value lists (all of them hidden is OD004's case)."""
    value, count = facts.get("env.CUDA_VISIBLE_DEVICES"), _gpu_count(facts.get("gpu.count"))
    if not isinstance(value, str) or count is None:
        return None
    used, ignored = visible_entries(value, count)
    if not used or not ignored or facts.get("plan.device") == "cpu" or _torch_sees(facts) > len(used):
        return None
    return {"used": ",".join(used), "ignored": ",".join(ignored), "first_bad": ignored[0] or "''"}
