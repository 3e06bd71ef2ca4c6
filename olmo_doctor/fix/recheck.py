"""Re-run the check after fixes, as the user's next shell will see it: with .olmo-doctor/env.sh sourced.

Fixes that write the env file only take effect once it is sourced, so the re-check applies its exports, unsets
and soft limits to this process for the duration of the check, then puts everything back.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from olmo_doctor.findings import Finding
from olmo_doctor.fix.envfile import overlay

_LIMITS = {"nofile": (resource.RLIMIT_NOFILE, 1), "memlock": (resource.RLIMIT_MEMLOCK, 1024)}  # ulimit -l is KiB


@contextmanager
def sourced(text: str | None) -> Iterator[None]:
    """This process's environment and soft limits as after `source env.sh` (text None: unchanged)."""
    if not text:
        yield
        return
    ov = overlay(text)
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


def recheck(before: list[str], check: Callable[[], list[Finding]], env_text: str | None) -> Recheck:
    """Which of the `before` finding codes are gone after the fixes, which remain, and any new ones."""
    with sourced(env_text):
        after = check()
    codes = [f.code for f in after]
    return Recheck(gone=[c for c in before if c not in codes], remaining=[c for c in before if c in codes],
                   new=[c for c in codes if c not in before], has_errors=any(f.severity == "error" for f in after))
