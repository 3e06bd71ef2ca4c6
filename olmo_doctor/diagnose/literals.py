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
from collections.abc import Callable
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


def _run_chars(op: Any, av: Any) -> str | None:
    """The characters a node adds to the literal run it stands in ("" for a zero-width node); None when the node
    ends the run."""
    if op is _c.LITERAL:
        return chr(av).lower()
    if op is _c.IN:
        return _single_char(av)
    if op in _ZERO_WIDTH:
        return ""
    if op is _c.SUBPATTERN and av[-1].data and all(o is _c.LITERAL for o, _ in av[-1].data):
        return "".join(chr(v).lower() for _, v in av[-1].data)  # `(cc1plus)`: part of the run
    return None


def _branch(av: Any) -> Alt | None:
    """`a|b`: one of each branch's requirements, when every branch has one."""
    alts = [_seq(branch.data) for branch in av[1]]
    if alts and all(a is not None for a in alts):
        return frozenset(s for a in alts if a is not None for s in a)
    return None


def _repeat(av: Any) -> Alt | None:
    low, _high, body = av
    return _seq(body.data) if low >= 1 else None  # `x*` may match nothing


# What a group, an alternation, a repeat or an atomic group requires; any other node (any character, a class, a
# back-reference) requires nothing and ends the literal run.
_NESTED: dict[Any, Callable[[Any], Alt | None]] = {
    _c.SUBPATTERN: lambda av: _seq(av[-1].data),
    _c.BRANCH: _branch,
    **{op: _repeat for op in _REPEATS},
    **({_ATOMIC: lambda av: _seq(av.data)} if _ATOMIC is not None else {}),
}


def _collect(items: Any) -> list[Alt]:
    """Every requirement a sequence of regex nodes imposes (each alone is a valid prefilter)."""
    found: list[Alt] = []
    run = ""
    for op, av in items:
        chars = _run_chars(op, av)
        if chars is not None:
            run += chars
            continue
        if run:
            found.append(frozenset({run}))
            run = ""
        nested = _NESTED.get(op)
        if nested is not None and (inner := nested(av)) is not None:
            found.append(inner)
    if run:
        found.append(frozenset({run}))
    return [a for a in found if a and min(len(s.strip()) for s in a) > 0]


def _seq(items: Any) -> Alt | None:
    """The best requirement of a sequence of regex nodes (strings of 3+ characters preferred)."""
    found = _collect(items)
    long_enough = [a for a in found if weakest(a) >= 3] or found
    return max(long_enough, key=_strength) if long_enough else None


def _nodes(pattern: str | re.Pattern[str]) -> Any:
    """The pattern's parse tree (a sequence of regex nodes), or None when it does not compile."""
    source = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    try:
        return _parser.parse(source).data
    except re.error:
        return None


def candidates(pattern: str | re.Pattern[str]) -> list[Alt]:
    """All top-level requirements of 3+ characters, most selective first (by the static estimate); the scan
    picks among them with the character frequencies of the log at hand."""
    nodes = _nodes(pattern)
    if nodes is None:
        return []
    return sorted((a for a in _collect(nodes) if weakest(a) >= 3), key=_strength, reverse=True)


def required(pattern: str | re.Pattern[str]) -> Alt | None:
    """Lowercase strings of which every match contains at least one; None when nothing is required."""
    nodes = _nodes(pattern)
    return None if nodes is None else _seq(nodes)


def weakest(alt: Alt | None) -> int:
    """Length of the shortest required string (0 when none): below 3 the prefilter is not worth it."""
    return 0 if not alt else min(len(s) for s in alt)


def plain(pattern: str | re.Pattern[str]) -> bool:
    """No anchors (`^ $ \\A \\Z`) and no lookbehinds: whether such a pattern matches a line does not change when
    a tool prefix is cut from the line's start, so searching the raw line is as good as searching the rest."""
    nodes = _nodes(pattern)
    return False if nodes is None else _plain(nodes)


_ANCHORS = {_c.AT_BEGINNING, _c.AT_BEGINNING_STRING, _c.AT_END, _c.AT_END_STRING, _c.AT_BEGINNING_LINE,
            _c.AT_END_LINE}


def _lookaround(av: Any) -> list[Any] | None:
    return None if av[0] < 0 else [av[1]]  # a lookbehind is not plain


# The regexes nested in a node, for the nodes that hold some
_INNER: dict[Any, Callable[[Any], list[Any] | None]] = {
    _c.ASSERT: _lookaround,
    _c.ASSERT_NOT: _lookaround,
    _c.SUBPATTERN: lambda av: [av[-1]],
    _c.BRANCH: lambda av: list(av[1]),
    **{op: (lambda av: [av[2]]) for op in _REPEATS},
    **({_ATOMIC: lambda av: [av]} if _ATOMIC is not None else {}),
}


def _plain(items: Any) -> bool:
    for op, av in items:
        if op is _c.AT and av in _ANCHORS:
            return False
        inner = _INNER[op](av) if op in _INNER else []
        if inner is None or not all(_plain(sub.data) for sub in inner):
            return False
    return True
