"""Re-run the check after fixes, as the user's next shell will see it: with olmo-doctor's own lines of
.olmo-doctor/env.sh applied.

Fixes that write the env file only take effect once it is sourced, so the re-check applies exports, unsets and
soft limits to this process for the duration of the check, then puts everything back. The file is data: a
project can ship one (a cloned repository's `export LD_PRELOAD=...`, `PATH=./bin:...`, `PYTHONPATH=...`), and
the user never sourced it. So only statements olmo-doctor wrote itself are applied: this run's, and those of
earlier runs recorded in this project's signed journal that are still applied (`trusted_lines`). The dry run and
the apply show which lines the re-check applies and which it leaves alone (`env_lines`).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from olmo_doctor.findings import Finding
from olmo_doctor.fix.envfile import overlay, parse

if TYPE_CHECKING:
    from olmo_doctor.fix.plan import FixPlan

_LIMITS = {"nofile": (resource.RLIMIT_NOFILE, 1), "memlock": (resource.RLIMIT_MEMLOCK, 1024)}  # ulimit -l is KiB


def _own_lines(plan_items: list[Any]) -> set[str]:
    lines: set[str] = set()
    for item in plan_items:
        if isinstance(item, dict) and item.get("op") == "write_env_file" and isinstance(item.get("own_lines"), list):
            lines.update(s for s in item["own_lines"] if isinstance(s, str))
    return lines


def trusted_lines(project: Path, plan: FixPlan) -> frozenset[str]:
    """The env-file statements olmo-doctor wrote: this plan's, and those of this project's signed journal entries
    that are still applied. A tampered, foreign or unsigned entry contributes nothing."""
    from olmo_doctor.fix import journal_key
    from olmo_doctor.fix.journal import Journal, JournalError

    lines = _own_lines([i.to_json() for i in plan.to_run])
    if not journal_key.exists():  # no key yet: nothing was ever signed here, and a dry run creates no key
        return frozenset(lines)
    journal = Journal(project)
    try:
        ids = journal.ids()
    except JournalError:
        return frozenset(lines)
    for entry_id in ids:
        try:
            entry = journal.load(entry_id, verify=False)
        except JournalError:
            continue
        if entry.status == "applied":
            lines |= _own_lines(entry.data.get("plan", []))
    return frozenset(lines)


@dataclass(frozen=True)
class EnvLines:
    """The statements of the env file's olmo-doctor block the re-check applies, and the ones it leaves alone."""

    applies: list[str]
    ignored: list[str]

    def to_json(self) -> dict[str, list[str]]:
        return {"applies": self.applies, "ignored": self.ignored}


def env_lines(text: str | None, trusted: frozenset[str]) -> EnvLines:
    entries = parse(text or "").entries
    return EnvLines([e.statement for e in entries if e.statement in trusted],
                    [e.statement for e in entries if e.statement not in trusted])


@contextmanager
def sourced(text: str | None, trusted: frozenset[str] = frozenset()) -> Iterator[None]:
    """This process's environment and soft limits as after sourcing the trusted lines of env.sh."""
    if not text:
        yield
        return
    ov = overlay(text, only=trusted)
    saved_env = dict(os.environ)
    saved_limits: dict[int, tuple[int, int]] = {}
    try:
        os.environ.update(ov.set)
        for name in ov.unset:
            os.environ.pop(name, None)
        for res, value in ov.limits.items():
            which, unit = _LIMITS[res]
            soft, hard = resource.getrlimit(which)
            want = hard if value == "hard" else int(value) * unit
            if hard != resource.RLIM_INFINITY:
                want = min(want, hard)
            saved_limits[which] = (soft, hard)
            try:
                resource.setrlimit(which, (want, hard))
            except (ValueError, OSError):
                pass  # the shell would fail the same way; the re-check then still sees the old limit
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        for which, limits in saved_limits.items():
            try:
                resource.setrlimit(which, limits)
            except (ValueError, OSError):
                pass


@dataclass
class Recheck:
    gone: list[str]
    remaining: list[str]
    new: list[str]
    has_errors: bool

    def to_json(self) -> dict[str, object]:
        return {"gone": self.gone, "remaining": self.remaining, "new": self.new, "has_errors": self.has_errors}


def recheck(before: list[str], check: Callable[[], list[Finding]], env_text: str | None,
            trusted: frozenset[str] = frozenset()) -> Recheck:
    """Which of the `before` finding codes are gone after the fixes, which remain, and any new ones."""
    with sourced(env_text, trusted):
        after = check()
    codes = [f.code for f in after]
    return Recheck(gone=[c for c in before if c not in codes], remaining=[c for c in before if c in codes],
                   new=[c for c in codes if c not in before], has_errors=any(f.severity == "error" for f in after))
