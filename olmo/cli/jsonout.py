"""`--json` for `olmo` commands: exactly one JSON object on stdout, and nothing else there.

While a command runs in JSON mode everything it would print to stdout (log lines, tables, a library's print)
goes to stderr instead; at the end the command hands its summary to `emit`. A command that fails with bad input
(exit 2) emits `{"ok": false, "error": ...}` through `emit_error` in the entry point, so a script always gets
one object to parse, whatever happened.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

_real_stdout: list[TextIO] = []  # the stdout to write the object to, while a JSON command runs
_emitted = [False]


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null (a diverged loss is reported, not a parse error)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


@contextlib.contextmanager
def json_mode(enabled: bool) -> Iterator[None]:
    """While enabled, stdout is stderr; `emit` writes to the real stdout."""
    if not enabled:
        yield
        return
    _real_stdout.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _real_stdout.pop()


def active() -> bool:
    return bool(_real_stdout)


def emit(obj: dict[str, Any]) -> None:
    """Write the command's one JSON object (a line) to the real stdout. Under torchrun only rank 0 writes it:
    torchrun merges every rank's stdout into one stream, which must still hold one object."""
    _emitted[0] = True
    if int(os.environ.get("RANK", "0") or 0) != 0:
        return
    target = _real_stdout[-1] if _real_stdout else sys.stdout
    target.write(json.dumps(_clean(obj), sort_keys=False) + "\n")
    target.flush()


def reset() -> None:
    """A new command starts (the entry point calls this; tests run several commands in one process)."""
    _emitted[0] = False


def emit_error(argv: list[str], message: str, code: int) -> None:
    """The entry point's last word for a `--json` command that failed before emitting anything."""
    if "--json" in argv and not _emitted[0]:
        emit({"ok": False, "error": message, "exit_code": code})


def command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a typer command (one with a `json_` parameter) in JSON mode when `--json` was given."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with json_mode(bool(kwargs.get("json_"))):
            return fn(*args, **kwargs)

    return wrapper
