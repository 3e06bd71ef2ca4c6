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


def _strength(alt: Alt) -> tuple[int, int]:
    """How selective a disjunction is: its weakest member's length first, then fewer members."""
    return min(len(s.strip()) for s in alt), -len(alt)


def _single_char(av: list[tuple[Any, Any]]) -> str | None:
    """`[Kk]` (or one literal in a class) is the one character k, case aside."""
    chars = {chr(v).lower() for op, v in av if op is _c.LITERAL}
    if len(chars) == 1 and all(op is _c.LITERAL for op, _ in av):
        return chars.pop()
    return None


def _seq(items: Any) -> Alt | None:
    """The best requirement of a sequence of regex nodes."""
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
    useful = [a for a in found if a and min(len(s.strip()) for s in a) > 0]
    return max(useful, key=_strength) if useful else None


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
