"""The cause vocabulary: known_issues/CAUSES.md's table of root-cause slugs, each with its meaning and the
summary line ("area") of `olmo-doctor check` where a finding of that cause shows.

The table is the one place a cause is declared; the rule loader parses it (and caches it with the rules) and
refuses a rule whose cause is not in it, or a row whose area is not one of AREAS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The summary lines of `check`, in the order it prints them (render.area_lines fills one line per area).
AREAS = ("GPU", "CUDA", "Compiler", "C libraries", "Machine", "Python", "torch", "Kernels")
_SLUG = re.compile(r"^[a-z0-9_]+$")
_SEPARATOR = re.compile(r"^\|[\s|:-]+\|$")


class RuleError(ValueError):
    """A rules file (or CAUSES.md) breaks the schema; the message names the file and the field."""


@dataclass(frozen=True)
class Cause:
    slug: str
    area: str
    meaning: str


def _row_problem(cells: list[str], seen: dict[str, Cause]) -> str | None:
    """What is wrong with one table row (its cells), or None."""
    if len(cells) != 3 or not _SLUG.match(cells[0]) or not cells[2]:
        return "a row must read | cause_slug | area | meaning |"
    slug, area, _ = cells
    if area not in AREAS:
        return f"area '{area}' of {slug} is not one of {', '.join(AREAS)}"
    if slug in seen:
        return f"cause {slug} is listed twice"
    return None


def parse_causes(text: str, where: str = "CAUSES.md") -> dict[str, Cause]:
    """Every row of the `| cause | area | meaning |` table, by slug. A malformed row is a RuleError naming its
    line, so a cause added without its area fails at load instead of landing under the wrong summary line."""
    out: dict[str, Cause] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith("|") or _SEPARATOR.match(line):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == ["cause", "area"]:  # the header row
            continue
        problem = _row_problem(cells, out)
        if problem:
            raise RuleError(f"{where} line {number}: {problem}")
        out[cells[0]] = Cause(*cells)
    if not out:
        raise RuleError(f"{where}: no | cause | area | meaning | table found")
    return out
