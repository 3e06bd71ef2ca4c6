"""Numeric release numbers, standard library only: how drivers, CUDA toolkits, compute capabilities and Python
versions are ordered on the path install.sh runs before any venv (and packaging) exists.

These strings carry only a dotted number ('580.65.06', '12.8', '9.0', '3.12.3'), and for them this order is PEP 440
order (versions.py, which needs packaging): the first dotted number of the text, compared part by part, trailing
zeros ignored ('570.26' == '570.26.0'). tests/doctor/test_compat_agreement.py checks that the two orders agree on every
value of the tables and their boundaries. Anything that can carry a pre-release, a nightly or a local tag (torch,
torchao) is ordered by versions.py instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

V = TypeVar("V")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)*")


def release(text: object) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); '12.0' -> (12,); 'V12.4.131' -> (12, 4, 131); () when there is no number."""
    if text is None or isinstance(text, bool):
        return ()
    m = _NUMBER.search(str(text)[:256])  # versions are short; bound the work on hostile input
    if not m:
        return ()
    parts = [int(p) for p in m.group(0).split(".")[:8]]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def major_minor(text: object) -> tuple[int, int] | None:
    """'12.8.93' -> (12, 8); '13' -> (13, 0); 'V13.0.88' -> (13, 0); None when there is no number."""
    parts = release(text)
    if not parts:
        return None
    return parts[0], parts[1] if len(parts) > 1 else 0


def at_or_below(rows: Mapping[str, V] | Iterable[tuple[str, V]], version: object,
                key: Callable[[object], tuple[int, ...] | None] = major_minor) -> V | None:
    """The value of the last row whose version is at or below `version` (rows in ascending order): the one
    lookup behind every 'nearest listed release at or below' table. None when nothing is, or `version` is
    unreadable."""
    want = key(version)
    if not want:
        return None
    best: V | None = None
    for row, value in rows.items() if isinstance(rows, Mapping) else rows:
        have = key(row)
        if have and have <= want:
            best = value
    return best
