"""Conditions on the installed distributions' declared requirements (what `pip check` reports)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue
from olmo_doctor.probes.requirements import LINE

# Distributions whose unmet requirements break torch or the trainer itself (olmo-doctor ships the trainer).
CRITICAL = frozenset({"torch", "olmo-doctor"})
# Never installed by a safe fix: these replace compiled code (SCHEMA.md, Fix actions), and pip undoes the rest.
_NOT_SAFE = frozenset({"torch", "flash-attn", "xformers", "pip"})


def _rows(lines: list[str], critical: bool, clashing: set[str]) -> list[re.Match[str]]:
    """The parsed unmet-requirement lines of critical (or other) distributions; a distribution that clashes with
    the trainer is to be removed (OD260), never served, so its own needs are left out."""
    rows = [m for m in (LINE.match(str(x)) for x in lines) if m]
    return [m for m in rows
            if (m.group("dist").lower() in CRITICAL) == critical and _norm(m.group("dist")) not in clashing]


def _safe_to_install(requirement: str) -> bool:
    """Not a distribution pip must not replace on its own (torch and the kernels built for it)."""
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower() not in _NOT_SAFE


def _unmet(facts: Mapping[str, FactValue], critical: bool) -> Context:
    lines = facts.get("python.unmet_requirements")
    if not isinstance(lines, list):
        return None
    rows = _rows(lines, critical, _clashing(facts))
    if not rows:
        return None
    rows.sort(key=lambda m: m.group("dist").lower() != "torch")  # torch's own needs first: it breaks first
    reqs = list(dict.fromkeys(m.group("req") for m in rows))
    safe = [r for r in reqs if _safe_to_install(r)]
    return {
        "unmet_count": len(rows),
        "unmet_list": "; ".join(f"{m.group('dist')} {m.group('version')} needs {m.group('req')} "
                                f"({'has ' + m.group('has') if m.group('has') else 'not installed'})" for m in rows),
        "requirement": safe[0] if safe else "unknown",
        "requirements": reqs,
    }


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _clashing(facts: Mapping[str, FactValue]) -> set[str]:
    """Distributions that provide the trainer's own top-level module (`olmo`) instead of this project."""
    origin = facts.get("olmo.module_origin")
    return {_norm(origin)} if isinstance(origin, str) and origin and _norm(origin) != "olmo-doctor" else set()


@fact_check
def unmet_critical(facts: Mapping[str, FactValue]) -> Context:
    """Requirements of torch or olmo-doctor (and its trainer) that the environment does not meet."""
    return _unmet(facts, critical=True)


@fact_check
def unmet_other(facts: Mapping[str, FactValue]) -> Context:
    """Unmet requirements of any other installed distribution."""
    return _unmet(facts, critical=False)
