"""Where one log line meets the next, as a terminal showed them: a line's carriage-return redraws as pieces
(tool prefixes removed), the piece a signature matches, and two lines joined across a hard wrap, for the signatures
that span a line break (olmo_doctor/diagnose/scan.py's pair search)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from olmo_doctor.diagnose.reader import unprefix


def segments(raw: str) -> Iterator[str]:
    """The pieces a terminal would have shown: each carriage-return redraw, without tool prefixes."""
    for part in raw.split("\r") if "\r" in raw else (raw,):
        part = unprefix(part).rstrip()
        if part:
            yield part


def match_line(pattern: re.Pattern[str], raw: str) -> str | None:
    """The piece of `raw` the pattern matches (the line itself when it has no redraws), or None."""
    if "\r" not in raw:  # the usual line: one piece
        part = unprefix(raw).rstrip()
        return part if part and pattern.search(part) else None
    for seg in segments(raw):
        if pattern.search(seg):
            return seg
    return None


# a terminal's hard wrap: a full-width line cut inside a word, continued at column 0 ("... -- unsupp" / "orted
# Microsoft Visual Studio version!"); the two halves join without a blank
HARD_WRAP = 80


def separator(a: bytes, b: bytes) -> bytes:
    """What joins line `a` to line `b`: nothing across a hard wrap cut inside a word, else one blank."""
    a = a.rstrip(b"\r")
    cut = len(a) >= HARD_WRAP and a[-1:].isalnum() and b[:1].isalnum()
    return b"" if cut else b" "


def join_lines(a: str, b: str) -> str:
    """The end of line `a` and the start of line `b` as one text (the last and the first piece a terminal showed)."""
    left = next(reversed(list(segments(a))), "")
    right = next(iter(segments(b)), "")
    sep = separator(a.encode(), b.encode()).decode()
    return f"{left.rstrip()}{sep}{right.strip()}"
