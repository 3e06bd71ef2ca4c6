"""What text must a regex's match contain? Used to prefilter a huge log before running any signature on it.

`required(pattern)` walks the parsed regex and returns a set of lowercase strings such that every match of the
pattern contains at least one of them (a disjunction), or None when no useful literal is required (then the
signature runs on every line, which is slow; tests keep shipped signatures off that path).

    required("Killed signal terminated program (cc1plus|cicc)")  ->  {"killed signal terminated program "}
    required("(No space left on device|Errno 28)")              ->  {"no space left on device", "errno 28"}

Lowercase because the scan is case-insensitive; a case-sensitive signature is still correctly prefiltered by a
case-insensitive test (it can only let more lines through).
"""

from __future__ import annotations

import math
import re
from typing import Any

try:  # Python >= 3.11
    import re._constants as _c
    import re._parser as _parser
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _parser

Alt = frozenset[str]

# Nodes that consume no text: a literal run continues across them (`\bKilled\b`, `^error`, lookarounds).
_ZERO_WIDTH = {_c.AT, _c.ASSERT, _c.ASSERT_NOT}
_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)


# Rough share (%) of each character in build and training logs (English letter frequencies, spaces, paths and
# numbers); only the ordering matters. Rarer characters make a required string more selective.
_FREQ = {
    " ": 14.0, "e": 9.0, "t": 7.0, "a": 6.0, "o": 6.0, "i": 6.0, "n": 6.0, "s": 5.5, "r": 5.5, "h": 3.5,
    "l": 3.5, "d": 3.0, "c": 3.0, "u": 2.5, "m": 2.0, "p": 2.0, "f": 1.8, "/": 1.8, "g": 1.5, "_": 1.5, ".": 1.5,
    "b": 1.3, "w": 1.2, "y": 1.2, "-": 1.2, "0": 1.2, "1": 1.0, "2": 0.8, "v": 0.8, "k": 0.6, "3": 0.6, ":": 0.6,
    "x": 0.5, "'": 0.4, "=": 0.4, "(": 0.3, ")": 0.3, ",": 0.3, "j": 0.15, "q": 0.1, "z": 0.1,
}
_RARE = 0.2  # any character not listed


def information(text: str) -> float:
    """Bits of surprise in a string under _FREQ: how unlikely a random log position is to match it."""
    return sum(_bits(ch) for ch in text)


def _bits(ch: str) -> float:
    return -math.log2(_FREQ.get(ch, 1.0 if ch.isdigit() else _RARE) / 100)


def _selectivity(text: str) -> float:
    """The scan anchors on a string's rarest character; its length (information) breaks near-ties."""
    rarest = max((_bits(c) for c in text if not c.isspace()), default=0.0)
    return rarest + 0.1 * information(text.strip())


def _strength(alt: Alt) -> tuple[float, int]:
    """How selective a disjunction is for the prefilter: its weakest member's selectivity, then fewer members."""
    return min(_selectivity(s) for s in alt), -len(alt)


def _single_char(av: list[tuple[Any, Any]]) -> str | None:
    """`[Kk]` (or one literal in a class) is the one character k, case aside."""
    chars = {chr(v).lower() for op, v in av if op is _c.LITERAL}
    if len(chars) == 1 and all(op is _c.LITERAL for op, _ in av):
        return chars.pop()
    return None


def _collect(items: Any) -> list[Alt]:
    """Every requirement a sequence of regex nodes imposes (each alone is a valid prefilter)."""
    found: list[Alt] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            found.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av).lower())
        elif op is _c.IN and (ch := _single_char(av)) is not None:
            run.append(ch)
        elif op in _ZERO_WIDTH:
            continue
        elif op is _c.SUBPATTERN:
            sub = av[-1]
            if sub.data and all(o is _c.LITERAL for o, _ in sub.data):  # `(cc1plus)`: part of the run
                run.extend(chr(v).lower() for _, v in sub.data)
                continue
            flush()
            if (inner := _seq(sub.data)) is not None:
                found.append(inner)
        elif op is _c.BRANCH:
            flush()
            alts = [_seq(branch.data) for branch in av[1]]
            if alts and all(a is not None for a in alts):
                found.append(frozenset(s for a in alts if a is not None for s in a))
        elif op in _REPEATS:
            flush()
            low, _high, body = av
            if low >= 1 and (inner := _seq(body.data)) is not None:
                found.append(inner)
        elif _ATOMIC is not None and op is _ATOMIC:
            flush()
            if (inner := _seq(av.data)) is not None:
                found.append(inner)
        else:  # any character, a class, a back-reference: the run ends here
            flush()
    flush()
    return [a for a in found if a and min(len(s.strip()) for s in a) > 0]


def _seq(items: Any) -> Alt | None:
    """The best requirement of a sequence of regex nodes (strings of 3+ characters preferred)."""
    found = _collect(items)
    long_enough = [a for a in found if weakest(a) >= 3] or found
    return max(long_enough, key=_strength) if long_enough else None


def candidates(pattern: str | re.Pattern[str]) -> list[Alt]:
    """All top-level requirements of 3+ characters, most selective first (by the static estimate); the scan
    picks among them with the character frequencies of the log at hand."""
    source = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    try:
        parsed = _parser.parse(source)
    except re.error:
        return []
    return sorted((a for a in _collect(parsed.data) if weakest(a) >= 3), key=_strength, reverse=True)


def required(pattern: str | re.Pattern[str]) -> Alt | None:
    """Lowercase strings of which every match contains at least one; None when nothing is required."""
    source = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    try:
        parsed = _parser.parse(source)
    except re.error:
        return None
    return _seq(parsed.data)


def weakest(alt: Alt | None) -> int:
    """Length of the shortest required string (0 when none): below 3 the prefilter is not worth it."""
    return 0 if not alt else min(len(s) for s in alt)


def plain(pattern: str | re.Pattern[str]) -> bool:
    """No anchors (`^ $ \\A \\Z`) and no lookbehinds: whether such a pattern matches a line does not change when
    a tool prefix is cut from the line's start, so searching the raw line is as good as searching the rest."""
    source = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    try:
        parsed = _parser.parse(source)
    except re.error:
        return False
    return _plain(parsed.data)


_ANCHORS = {_c.AT_BEGINNING, _c.AT_BEGINNING_STRING, _c.AT_END, _c.AT_END_STRING, _c.AT_BEGINNING_LINE,
            _c.AT_END_LINE}


def _plain(items: Any) -> bool:
    for op, av in items:
        if op is _c.AT and av in _ANCHORS:
            return False
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            if av[0] < 0:  # a lookbehind
                return False
            inner = [av[1]]
        elif op is _c.SUBPATTERN:
            inner = [av[-1]]
        elif op is _c.BRANCH:
            inner = list(av[1])
        elif op in _REPEATS:
            inner = [av[2]]
        elif _ATOMIC is not None and op is _ATOMIC:
            inner = [av]
        else:
            continue
        if not all(_plain(sub.data) for sub in inner):
            return False
    return True
