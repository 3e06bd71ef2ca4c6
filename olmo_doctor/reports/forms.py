"""GitHub issue forms: each field is a markdown heading ("### Pytorch version") with the answer on a line of its
own below it ("2.7.0+cu128"), usually after a blank line. Neither line states a fact alone; together they are the
"name: value" the mention reader knows, so each heading is read with the answer under it.

Only a short one-line answer right under its heading counts: a heading over a paragraph, a log or another heading
is a section, not a field. A list that puts each name on a line and its version on the next ("torch" then "2.1.1")
is read the same way, pair by pair.
"""

from __future__ import annotations

import re

from olmo_doctor.reports import mentions
from olmo_doctor.reports.observe import Observation
from olmo_doctor.reports.vocabulary import VERSION

_HEADING = re.compile(r"^\s{0,3}#{2,6}\s{1,4}(?P<label>[^#\n]{1,80}?)\s{0,4}#{0,6}$")
_MAX_ANSWER = 100
_GAP = 2  # blank lines a form leaves between a heading and its answer
_MAX_NAME = 40


def _answer(lines: list[str], i: int) -> int | None:
    """The line holding the heading's one-line answer, or None when what follows is no single short line."""
    at = next((j for j in range(i + 1, min(i + 2 + _GAP, len(lines))) if lines[j].strip()), None)
    if at is None or _HEADING.match(lines[at]) or len(lines[at].strip()) > _MAX_ANSWER:
        return None
    return at if _ends_there(lines, at) else None


def _ends_there(lines: list[str], at: int) -> bool:
    """The answer is one line: a blank line, the next heading or the end follows it."""
    after = lines[at + 1].strip() if at + 1 < len(lines) else ""
    return not after or bool(_HEADING.match(lines[at + 1]))


_BARE_VERSION = re.compile(rf"v?{VERSION}")


def _alternating(lines: list[str], skip: set[int]) -> list[Observation]:
    """A list with each name on its line and its version on the next ("torch" then "2.1.1"): one "name: value"."""
    out: list[Observation] = []
    for i in range(len(lines) - 1):
        name, value = lines[i].strip(), lines[i + 1].strip()
        if (i in skip or i + 1 in skip or not name or len(name) > _MAX_NAME or name.lower() not in mentions.ALIASES
                or not _BARE_VERSION.fullmatch(value)):
            continue
        out += [Observation(ob.key, ob.value, i + 1, f"{name}: {value}")
                for ob in mentions.line_mentions(f"{name}: {value}", i + 1)]
    return out


def read(lines: list[str], skip: set[int]) -> list[Observation]:
    out: list[Observation] = _alternating(lines, skip)
    for i, line in enumerate(lines):
        if "#" not in line[:4] or not (m := _HEADING.match(line)):
            continue
        at = _answer(lines, i)
        if at is None or at in skip:
            continue
        field = f"{m.group('label').strip()}: {lines[at].strip()}"
        out += [Observation(ob.key, ob.value, at, field) for ob in mentions.line_mentions(field, at)]
    return out
