"""Code conditions for rules about the environment's own consistency: unmet requirements of installed
distributions and GPUs hidden by CUDA_VISIBLE_DEVICES. A rule names one with `check = "env_checks.<function>"`;
it gets the facts and returns None (quiet) or a dict of values its templates use."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from olmo_doctor.facts import FactValue
from olmo_doctor.probes.requirements import LINE

# Distributions whose unmet requirements break torch or the trainer itself (olmo-doctor ships the trainer).
CRITICAL = frozenset({"torch", "olmo-doctor"})
# Never installed by a safe fix: these replace compiled code (SCHEMA.md, Fix actions), and pip undoes the rest.
_NOT_SAFE = frozenset({"torch", "flash-attn", "xformers", "pip"})


def _unmet(facts: Mapping[str, FactValue], critical: bool) -> dict[str, object] | None:
    lines = facts.get("python.unmet_requirements")
    if not isinstance(lines, list):
        return None
    rows = [m for m in (LINE.match(str(x)) for x in lines) if m]
    rows = [m for m in rows if (m.group("dist").lower() in CRITICAL) == critical]
    if not rows:
        return None
    rows.sort(key=lambda m: m.group("dist").lower() != "torch")  # torch's own needs first: it breaks first
    reqs = list(dict.fromkeys(m.group("req") for m in rows))
    safe = [r for r in reqs if re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower() not in _NOT_SAFE]
    return {
        "unmet_count": len(rows),
        "unmet_list": "; ".join(f"{m.group('dist')} {m.group('version')} needs {m.group('req')} "
                                f"({'has ' + m.group('has') if m.group('has') else 'not installed'})" for m in rows),
        "requirement": safe[0] if safe else "unknown",
        "install_command": "pip install " + " ".join(shlex.quote(r) for r in reqs),
    }


def unmet_critical(facts: Mapping[str, FactValue]) -> dict[str, object] | None:
    """Requirements of torch or olmo-doctor (and its trainer) that the environment does not meet."""
    return _unmet(facts, critical=True)


def unmet_other(facts: Mapping[str, FactValue]) -> dict[str, object] | None:
    """Unmet requirements of any other installed distribution."""
    return _unmet(facts, critical=False)


def visible_gpu_count(value: str, count: int) -> int:
    """How many GPUs the CUDA runtime sees under CUDA_VISIBLE_DEVICES=value on a machine with `count` GPUs: it
    reads entries up to the first one that is invalid or out of range ('' and '-1' hide every GPU); UUID and MIG
    entries are taken as valid."""
    seen = 0
    for token in value.split(","):
        token = token.strip()
        if re.fullmatch(r"-?\d+", token):
            if not 0 <= int(token) < count:
                break
            seen += 1
        elif token.startswith(("GPU-", "MIG-")):
            seen += 1
        else:
            break
    return seen


def gpus_hidden(facts: Mapping[str, FactValue]) -> dict[str, object] | None:
    """The driver sees GPUs, CUDA_VISIBLE_DEVICES hides all of them, and the plan is not a CPU run."""
    value, count = facts.get("env.CUDA_VISIBLE_DEVICES"), facts.get("gpu.count")
    if not isinstance(value, str) or not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    if facts.get("plan.device") == "cpu" or visible_gpu_count(value, count) > 0:
        return None
    return {"visible_value": repr(value)}
