"""Run external tools for probes: never raises, always bounded in time, replaceable in tests.

A probe receives a `Runner`; the real one calls subprocess, `FakeRunner` answers from a dict so that probes run
on fixtures without the tools installed.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from olmo_doctor.isolation import child_env, which


@dataclass(frozen=True)
class Result:
    """What running a command gave; `ok` is False when the tool is missing, timed out or failed."""

    ok: bool
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None


MISSING = Result(ok=False, returncode=None)

Runner = Callable[[Sequence[str]], Result]


def run(argv: Sequence[str], timeout: float = 10.0, env: Mapping[str, str] | None = None) -> Result:
    """Run argv (no shell) and capture its output; a missing tool or a timeout gives ok=False."""
    exe = which(argv[0])  # PATH's absolute entries only: never a tool from the working folder
    if exe is None:
        return MISSING
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=child_env(user_paths=True, base=env),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return MISSING
    return Result(ok=proc.returncode == 0, stdout=proc.stdout, stderr=proc.stderr, returncode=proc.returncode)


class FakeRunner:
    """Answers commands from a table keyed by the argv joined with spaces; unknown commands are missing."""

    def __init__(self, answers: Mapping[str, str | Result]):
        self.answers = dict(answers)
        self.calls: list[str] = []

    def __call__(self, argv: Sequence[str]) -> Result:
        key = " ".join(argv)
        self.calls.append(key)
        answer = self.answers.get(key)
        if answer is None:
            return MISSING
        return answer if isinstance(answer, Result) else Result(ok=True, stdout=answer, returncode=0)
