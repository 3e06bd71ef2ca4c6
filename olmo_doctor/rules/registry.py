"""The code conditions a rule may name with `check = "..."`: an explicit table, nothing else.

A rule file is data. Its `check` string is looked up in CHECKS and never imported, resolved on PATH or
evaluated, so a rule (or a rules folder someone hands you) cannot make olmo-doctor load a module or run a
program of its choosing. Adding a code condition means adding its function here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from olmo_doctor import build_checks, env_checks
from olmo_doctor.facts import FactValue

CheckFn = Callable[[Mapping[str, FactValue]], Any]

CHECKS: dict[str, CheckFn] = {
    "build_checks.compile_jobs_exceed_memory": build_checks.compile_jobs_exceed_memory,
    "env_checks.gpus_hidden": env_checks.gpus_hidden,
    "env_checks.unmet_critical": env_checks.unmet_critical,
    "env_checks.unmet_other": env_checks.unmet_other,
}


def resolve(name: object) -> CheckFn | None:
    """The registered function for a rule's `check`, or None when the name is not registered."""
    return CHECKS.get(name) if isinstance(name, str) else None
