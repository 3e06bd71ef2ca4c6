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


def decode(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    if len(data) >= 16 and data[1::2].count(0) > 0.9 * (len(data) // 2) and data[0::2].count(0) < len(data) // 20:
        return data.decode("utf-16-le", errors="replace")  # UTF-16 without its byte-order mark
    text = data.decode("utf-8", errors="replace")
    high = sum(b >= 0x80 for b in data)
    if text.count("\ufffd") <= 0.1 * high:  # UTF-8 with at most a stray byte or two
        return text
    best, best_score = text, _score(text)
    for codec in _LEGACY:
        try:
            candidate = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if (score := _score(candidate)) > best_score:
            best, best_score = candidate, score
    return best


def _kind(ch: str) -> str:
    cp = ord(ch)
    if 0xFF61 <= cp <= 0xFF9F:
        return "odd"  # half-width katakana: what GBK bytes read as Shift-JIS look like
    if 0x3000 <= cp <= 0x303F or 0xFF00 <= cp <= 0xFF60 or 0x2000 <= cp <= 0x206F or cp == 0xA0:
        return "punct"
    if 0x3040 <= cp <= 0x30FF:
        return "kana"  # Japanese text always has some; Shift-JIS read as GBK gives hanzi only
    if 0x3400 <= cp <= 0x9FFF or 0xAC00 <= cp <= 0xD7AF:
        return "cjk"
    if unicodedata.category(ch)[0] in "CS" or ch == "\ufffd":
        return "odd"  # controls, unassigned, private use, symbols a paste does not hold
    return "latin"


def _score(text: str) -> int:
    score = 0
    for m in _NON_ASCII_RUN.finditer(text):
        run = m.group(0)
        kinds = {_kind(ch) for ch in run}
        before = text[m.start() - 1] if m.start() else " "
        after = text[m.end()] if m.end() < len(text) else " "
        glued = (before.isascii() and before.isalnum()) or (after.isascii() and after.isalnum())
        if "odd" in kinds:
            score -= 3 * len(run)
        elif kinds == {"latin"} or kinds == {"latin", "punct"}:
            score += len(run) if len(run) <= 2 else -len(run)  # "é", "’s"; not "»·¾³ÐÅ"
        elif kinds & {"cjk", "kana"} and len(run) == 1 and glued:
            score -= 2
        else:
            score += len(run) + sum(_kind(ch) == "kana" for ch in run)
    return score
