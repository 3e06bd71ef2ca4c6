"""Undo what pasting does to a report: quote prefixes, line-number or `|` gutters, common indentation, CRLF and
tabs, full-width punctuation, HTML escaping and tags, markdown fences and `<details>` wrappers.

`unwrap(text)` returns the report's own lines, ready for the format parsers. Nothing here interprets a value; it
only removes the wrapping, so every parser sees the same text however the report travelled.
"""

from __future__ import annotations

import html
import itertools
import re
from functools import lru_cache

# Tags issue trackers and mail clients wrap pasted text in; anything else that looks like a tag (`<user>`) stays.
_BLOCK_TAGS = re.compile(r"</?(?:details|summary|pre|code|p|div|blockquote|ul|ol|li|table|tbody|thead|tr|td|th|"
                         r"span|b|strong|em|i|tt|kbd|samp|font|h[1-6])\b[^<>]*>", re.I)
# a <br> the writer followed by a newline is one line break, not a blank line between every field
_BREAK = re.compile(r"<br\s*/?>[ \t]*(?:\r?\n)?|</(?:p|div|li|tr|pre)>", re.I)
# CSI colour codes, OSC titles/hyperlinks (`ESC ] ... BEL`) and any other lone control a terminal copy keeps
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?"
                   r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Characters that look like ASCII punctuation or spaces in CJK and rich-text pastes.
_LOOKALIKE = str.maketrans({"：": ":", "＝": "=", "（": "(", "）": ")", "，": ",", "\u00a0": " ", "\u3000": " ",
                            "\u2009": " ", "\u202f": " ", "｜": "|", "＞": ">"})
_INVISIBLE = re.compile("[\ufeff\u200b\u200c\u200d\u2060]")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_QUOTE = re.compile(r"^[ \t]*>[ \t]?")
_NUMBERED = re.compile(r"^[ \t]*(\d{1,5})(?:[ \t]*[|│:][ \t]?|[ \t]+|$)")
_PIPE = re.compile(r"^[ \t]*[|│┃][ \t]?")
# starts only where a blank run starts (the lookbehind): otherwise a search tries every position of a long run
_PIPE_END = re.compile(r"(?<![ \t])[ \t]*[|│┃][ \t]*$")


def _most(lines: list[str], pattern: re.Pattern[str], share: float = 0.6) -> bool:
    body = [ln for ln in lines if ln.strip()]
    return bool(body) and sum(bool(pattern.match(ln)) for ln in body) >= share * len(body)


def _body(lines: list[str]) -> int:
    """How many lines hold text."""
    return sum(1 for ln in lines if ln.strip())


def _numbered(lines: list[str]) -> bool:
    """A line-number gutter: most lines start with a number, and the numbers count up."""
    nums = [int(m.group(1)) for ln in lines if ln.strip() and (m := _NUMBERED.match(ln))]
    if len(nums) < 3 or len(nums) < 0.8 * _body(lines):
        return False
    rising = sum(b == a + 1 for a, b in itertools.pairwise(nums))
    return rising >= 0.7 * (len(nums) - 1)


def _dedent(lines: list[str]) -> list[str]:
    widths = [len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()]
    cut = min(widths, default=0)
    return [ln[cut:] if ln.strip() else "" for ln in lines] if cut else lines


def _strip_layers(lines: list[str]) -> list[str]:
    """Peel quote marks, gutters and indentation until none is left (`> 12 | ...` needs three passes)."""
    for _ in range(8):
        if any(_QUOTE.match(ln) for ln in lines):
            # no report line starts with '>', so every quote mark goes, even when prose around it is unquoted;
            # quoted mail and markdown continue a quote on lines without the mark, which stay as they are
            lines = [_QUOTE.sub("", ln, count=1) for ln in lines]
        elif _numbered(lines):
            lines = [_NUMBERED.sub("", ln, count=1) for ln in lines]
        elif _most(lines, _PIPE, 0.8):
            lines = [_PIPE_END.sub("", _PIPE.sub("", ln, count=1)) for ln in lines]
        else:
            dedented = _dedent(lines)
            if dedented == lines:
                return lines
            lines = dedented
    return lines


def _unhtml(text: str) -> str:
    if not (re.search(r"&(?:[a-z]+|#\d+|#x[0-9a-f]+);", text, re.I) or _BREAK.search(text)
            or _BLOCK_TAGS.search(text)):
        return text
    text = re.sub(r"</t[dh]>", " | ", text, flags=re.I)  # an HTML table row keeps its cells apart
    text = _BREAK.sub("\n", text)
    text = _BLOCK_TAGS.sub("", text)
    text = html.unescape(text)
    return _BLOCK_TAGS.sub("", _BREAK.sub("\n", text))  # a report escaped twice shows its tags only now


def _double_spaced(lines: list[str]) -> bool:
    """Four or more lines of text, hardly any (5%) followed directly by another."""
    body = [i for i, ln in enumerate(lines) if ln.strip()]
    adjacent = sum(1 for i in body if i + 1 < len(lines) and lines[i + 1].strip())
    return not (len(body) < 4 or adjacent > 0.05 * len(body))


def _single_spaced(lines: list[str]) -> list[str]:
    """Undo double spacing (a blank line after every line, as some web pages and editors copy): a lone blank line
    goes, a longer run of them was a real break and stays as one."""
    if not _double_spaced(lines):
        return lines
    out: list[str] = []
    for is_blank, run in itertools.groupby(lines, key=lambda ln: not ln.strip()):
        group = list(run)
        out += ([""] if len(group) > 1 else []) if is_blank else group
    return out


def unwrap(text: str) -> list[str]:
    """The report's own lines, with every layer of paste wrapping removed."""
    return list(_unwrap(text))


@lru_cache(maxsize=4)  # every reader of one report asks for the same lines: peel them once
def _unwrap(text: str) -> tuple[str, ...]:
    # \r\r\n is what a Windows console's output looks like after a second newline translation
    text = re.sub(r"\r+\n", "\n", text).replace("\r", "\n")
    text = _INVISIBLE.sub("", _ANSI.sub("", text)).translate(_LOOKALIKE)
    text = _unhtml(text)
    lines = [ln.expandtabs(4).rstrip() for ln in text.split("\n")]
    lines = _single_spaced(_strip_layers(lines))
    return tuple(ln for ln in lines if not _FENCE.match(ln))


def unwrap_text(text: str) -> str:
    return "\n".join(unwrap(text))


# a markdown table row with a version in two or more value cells: builds or machines side by side ("| CUDA toolkit
# (NVCC) | 12.9 (V12.9.86) | 13.0 (V13.0.88) |"), none of them this machine's alone
_VERSION_CELL = re.compile(r"^\s{0,2}`?v?\d{1,4}\.\d{1,4}")


def side_by_side(line: str) -> bool:
    """Whether the line is a table row comparing versions across columns (read by no reader)."""
    if line.count("|") < 2:  # (unwrapping drops a row's outer pipes: "NVCC | 12.9 | 13.0")
        return False
    cells = [c.strip() for c in line.strip().strip("|").split("|")][1:]
    return sum(bool(_VERSION_CELL.match(c)) for c in cells) >= 2
