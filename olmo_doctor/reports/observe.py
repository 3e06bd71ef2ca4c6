"""What a reader saw in a paste, and how the sightings become facts.

Every reader (tool signatures, printed Python expressions, the free-text mention reader) hands back Observations:
a fact key, a value, and the line it came from. `resolve` turns them into facts with their sources: one value, or
several that agree (a shorter form of the same version, "2.4" beside "2.4.0+cu121", keeps the longest), becomes
the fact; two values that disagree ("torch 2.1 vs torch 2.4", two environments in one paste) leave it unknown,
because a wrong fact makes rules fire wrongly while a missing one only keeps them quiet.
"""

from __future__ import annotations

from dataclasses import dataclass

from olmo_doctor.facts import Facts, FactValue


@dataclass(frozen=True)
class Source:
    """Where a fact was read: the line number (1-based, in the unwrapped paste) and the line itself."""

    line: int
    text: str
    via: str | None = None  # for a derived fact: the fact it follows from

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"line": self.line, "text": self.text[:300]}
        if self.via:
            out["via"] = self.via
        return out


Sources = dict[str, Source]
# what a tool printed where a value should be ("CUDA Version: ERR!"): the fact stays unknown and is not derived
UNREADABLE = "\x00unreadable"


@dataclass(frozen=True)
class Observation:
    key: str
    value: FactValue
    line: int  # 0-based index into the unwrapped lines
    text: str = ""


def _same(longer: FactValue, shorter: FactValue) -> bool:
    """Do two sightings state the same value? Equal, or the shorter is a prefix up to a version boundary."""
    if longer == shorter:
        return True
    if not isinstance(longer, str) or not isinstance(shorter, str):
        return False
    a, b = longer.lower(), shorter.lower()
    return a.startswith(b) and a[len(b):len(b) + 1] in ("", ".", "+", "-")


def agreeing(values: list[FactValue]) -> tuple[bool, FactValue]:
    """(all agree, the value to keep): the longest string form when every other is a prefix of it."""
    best = max(values, key=lambda v: len(str(v)) if v is not None else -1)
    return all(_same(best, v) for v in values), best


def resolve(observations: list[Observation], lines: list[str]) -> tuple[Facts, Sources, set[str]]:
    """Facts of the observations, each with the line it was first seen on, and the keys left out because their
    sightings disagree."""
    by_key: dict[str, list[Observation]] = {}
    for ob in observations:
        by_key.setdefault(ob.key, []).append(ob)
    facts: Facts = {}
    sources: Sources = {}
    conflicts: set[str] = set()
    for key, seen in by_key.items():
        ok, value = agreeing([ob.value for ob in seen])
        if not ok or any(ob.value == UNREADABLE for ob in seen):
            conflicts.add(key)
            continue
        facts[key] = value
        sources[key] = _source(next(ob for ob in seen if ob.value == value), lines)
    return facts, sources, conflicts


def _source(first: Observation, lines: list[str]) -> Source:
    """The line an observation was read from (1-based) and its text."""
    text = first.text or (lines[first.line] if 0 <= first.line < len(lines) else "")
    return Source(first.line + 1, text.strip())
