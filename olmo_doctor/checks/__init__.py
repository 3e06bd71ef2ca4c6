"""Every rule condition that is code, one function per condition, found through one registry.

Most rules say when they fire with a `when` expression over facts. A condition that needs arithmetic, parsing or
the machine's own state (a build request, the network interfaces) is a small function in this package, and its
rule names it: `check = "requirements.unmet_critical"` is `unmet_critical` in `checks/requirements.py`.

A rule file is data, so its `check` string is looked up in `CHECKS` and never imported, resolved on PATH or
evaluated: a rule (or a rules folder someone hands you) cannot make olmo-doctor load a module or run a program
of its choosing. Only the functions below, registered with `@fact_check` or `@build_check`, can be named.

Two kinds of condition:
- a fact check gets the facts and returns None (quiet) or a dict of the values its templates use;
- a build check also gets a `BuildContext` (the recipe, target GPUs and job sizing `build-kernels` planned); the
  BK rules are build checks, judged wherever a build is planned (`build-kernels`, `check --scope install`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from olmo_doctor.facts import FactValue

Context = dict[str, Any] | None
FactCheck = Callable[[Mapping[str, FactValue]], Context]
BuildCheck = Callable[[Mapping[str, FactValue], Any], Context]


@dataclass(frozen=True)
class Check:
    """One registered condition: its name as rules write it, the function, and whether it needs a build plan."""

    name: str
    func: Callable[..., Context]
    needs_build: bool

    @property
    def summary(self) -> str:
        """The first line of the function's docstring (what `explain` prints as the condition)."""
        return (self.func.__doc__ or "").strip().splitlines()[0] if self.func.__doc__ else self.name


CHECKS: dict[str, Check] = {}


def _register(func: Callable[..., Context], needs_build: bool) -> None:
    name = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"
    if name in CHECKS:
        raise RuntimeError(f"check {name} registered twice")
    CHECKS[name] = Check(name, func, needs_build)


def fact_check(func: FactCheck) -> FactCheck:
    """Register a condition over facts under `<module>.<function>`."""
    _register(func, needs_build=False)
    return func


def build_check(func: BuildCheck) -> BuildCheck:
    """Register a condition over facts and a planned build under `<module>.<function>`."""
    _register(func, needs_build=True)
    return func


def resolve(name: object) -> Check | None:
    """The registered condition a rule's `check` names, or None when no such name is registered."""
    _load()
    return CHECKS.get(name) if isinstance(name, str) else None


_loaded = False


def _load() -> None:
    """Import the condition modules (once): each registers its functions as it is imported."""
    global _loaded
    if _loaded:
        return
    from olmo_doctor.checks import (  # noqa: F401 - imported for their registrations
        build,
        caches,
        environment,
        kernels,
        limits,
        memory,
        nccl,
        requirements,
        runtime,
        settings,
    )

    _loaded = True
