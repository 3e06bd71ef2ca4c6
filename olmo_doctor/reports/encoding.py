"""Decode a report file whatever wrote it: UTF-8, the UTF-16 of Windows PowerShell's `>`, or the legacy code page
of a Windows console that redirected collect_env (GBK on Chinese Windows, Shift-JIS on Japanese, cp1252 with
smart quotes on Western).

Legacy code pages cannot be told apart by their bytes alone, so each is tried and the decoding that reads most
like text wins: CJK characters in runs or beside punctuation, a Western quote beside letters; a lone CJK character
glued to ASCII letters ("Here抯 the") or a run of accented Latin symbols ("»·¾³") is what a wrong guess looks like.
"""

from __future__ import annotations

import re
import unicodedata

_LEGACY = ("gb18030", "cp932", "cp1252")
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")
_ASCII = bytes(range(0x80))


def decode(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    if len(data) >= 16 and data[1::2].count(0) > 0.9 * (len(data) // 2) and data[0::2].count(0) < len(data) // 20:
        return data.decode("utf-16-le", errors="replace")  # UTF-16 without its byte-order mark
    text = data.decode("utf-8", errors="replace")
    high = len(data.translate(None, _ASCII))  # the bytes >= 0x80, counted in C
    if text.count("\ufffd") <= 0.1 * high:  # UTF-8 with at most a stray byte or two
        return text
    return _best_legacy(data, text)


def _best_legacy(data: bytes, text: str) -> str:
    """The legacy code page whose decoding reads most like text; the UTF-8 one (`text`) unless one beats it."""
    best, best_score = text, _score(text)
    for codec in _LEGACY:
        try:
            candidate = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if (score := _score(candidate)) > best_score:
            best, best_score = candidate, score
    return best


# (first, last code point, kind) of the ranges that decide between the legacy code pages, checked in order
_RANGES = (
    (0xFF61, 0xFF9F, "odd"),  # half-width katakana: what GBK bytes read as Shift-JIS look like
    (0x3000, 0x303F, "punct"), (0xFF00, 0xFF60, "punct"), (0x2000, 0x206F, "punct"), (0xA0, 0xA0, "punct"),
    (0x3040, 0x30FF, "kana"),  # Japanese text always has some; Shift-JIS read as GBK gives hanzi only
    (0x3400, 0x9FFF, "cjk"), (0xAC00, 0xD7AF, "cjk"),
)


def _kind(ch: str) -> str:
    cp = ord(ch)
    kind = next((kind for first, last, kind in _RANGES if first <= cp <= last), None)
    if kind is not None:
        return kind
    if unicodedata.category(ch)[0] in "CS" or ch == "\ufffd":
        return "odd"  # controls, unassigned, private use, symbols a paste does not hold
    return "latin"


def _glued(text: str, start: int, end: int) -> bool:
    """Does an ASCII letter or digit touch the run text[start:end]?"""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    return (before.isascii() and before.isalnum()) or (after.isascii() and after.isalnum())


def _run_score(run: str, glued: bool) -> int:
    """How much one run of non-ASCII characters reads like text (negative: like a wrong guess)."""
    kinds = {_kind(ch) for ch in run}
    if "odd" in kinds:
        return -3 * len(run)
    if kinds <= {"latin", "punct"} and "latin" in kinds:
        return len(run) if len(run) <= 2 else -len(run)  # "é", "’s"; not "»·¾³ÐÅ"
    if kinds & {"cjk", "kana"} and len(run) == 1 and glued:
        return -2
    return len(run) + sum(_kind(ch) == "kana" for ch in run)


def _score(text: str) -> int:
    return sum(_run_score(m.group(0), _glued(text, m.start(), m.end())) for m in _NON_ASCII_RUN.finditer(text))
