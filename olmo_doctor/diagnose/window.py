"""Bound what the scan sees: skip the middle of a huge log, shorten huge lines, strip escape sequences.

    pieces = lines(window(blocks), cuts)   # line-aligned UTF-8 chunks and Gap markers; cuts recorded

`window` passes the first SCAN_HEAD and the last SCAN_TAIL bytes of the text through and replaces the lines in
between by a `Gap` (their count, so line numbers stay right). `lines` re-cuts blocks at line ends, keeps the first
LINE_HEAD and the last LINE_TAIL bytes of any longer line (streamed: a line of a gigabyte without a newline holds
only those in memory) and strips ANSI escape sequences. Root causes sit in the first error or at the end of a
log, and the words of an error message at the start or the end of its line, so these cuts keep what matters.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

SCAN_HEAD = 16 << 20
SCAN_TAIL = 48 << 20
LINE_HEAD = 16 << 10
LINE_TAIL = 4 << 10
LINE_MAX = LINE_HEAD + LINE_TAIL
STRIP_STEP = 1 << 20

# ANSI CSI, OSC (ended by BEL or ST, never past the line) and two-byte escapes; every repeat bounded.
ANSI = re.compile(r"\x1b(?:\[[0-?]{0,64}[ -/]{0,8}[@-~]|\][^\x07\x1b\n]{0,512}(?:\x07|\x1b\\)|[@-Z\\-_])")
_ANSI_BYTES = re.compile(ANSI.pattern.encode())


@dataclass
class Cuts:
    """What of the input the scan did not see, for the note in the output."""

    long_lines: int = 0  # lines shortened to their first and last bytes
    first_long_line: int = 0
    long_bytes: int = 0  # bytes left out of them
    skipped_from: int = 0  # first line of the skipped middle (0: nothing skipped)
    skipped_lines: int = 0
    skipped_bytes: int = 0
    stopped_at: int = 0  # bytes of text read when reading stopped early (0: read to the end)
    stop_reason: str = ""
    unchecked: int = 0  # lines not checked against all their candidate signatures: the work budget ran out
    first_unchecked_line: int = 0

    def __bool__(self) -> bool:
        return bool(self.long_lines or self.skipped_bytes or self.stopped_at or self.unchecked)

    def to_json(self) -> dict[str, int | str]:
        return asdict(self)

    def sentences(self) -> list[str]:
        out = []
        if self.stopped_at and "damaged" in self.stop_reason:
            out.append(f"reading stopped after {_size(self.stopped_at)} of text: {self.stop_reason}")
        elif self.stopped_at:
            out.append(f"reading stopped after {_size(self.stopped_at)} of text ({self.stop_reason}); "
                       "what follows was not read: give the end of the log, e.g. `tail -c 50M LOG > end.log`")
        if self.skipped_bytes:
            last = self.skipped_from + self.skipped_lines - 1
            out.append(f"lines {self.skipped_from:,}-{last:,} ({_size(self.skipped_bytes)}) in the middle were "
                       f"skipped; the first {_size(SCAN_HEAD)} and the last {_size(SCAN_TAIL)} were scanned")
        if self.long_lines:
            out.append(f"{self.long_lines:,} line(s) longer than {_size(LINE_MAX)} were shortened to their first "
                       f"and last bytes (first at line {self.first_long_line:,}; {_size(self.long_bytes)} left out)")
        if self.unchecked:
            out.append(f"{self.unchecked:,} line(s) from line {self.first_unchecked_line:,} on were not checked "
                       "against every known error they resemble: the log holds more near misses than a scan's "
                       "work budget allows (it grows with the log's size); give the part of the log around the "
                       "failure")
        return out


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Gap:
    """Whole lines of the input that were skipped."""

    lines: int
    size: int


def window(blocks: Iterable[bytes], head: int | None = None, tail: int | None = None) -> Iterator[bytes | Gap]:
    """The blocks of the first `head` bytes (to a block boundary), a Gap, and the last `tail` bytes from a line
    start; the blocks unchanged when the text is not longer than that. Holds at most `tail` + one block."""
    head = SCAN_HEAD if head is None else head
    tail = SCAN_TAIL if tail is None else tail
    it = iter(blocks)
    kept: deque[bytes] = deque()
    yield from _head(it, head, kept)
    gap_lines, gap_size = _keep_tail(it, kept, tail)
    if gap_size:
        yield _start_on_a_line(kept, gap_lines, gap_size)
    yield from kept


def _head(it: Iterator[bytes], head: int, kept: deque[bytes]) -> Iterator[bytes]:
    """The blocks of the first `head` bytes, the last one cut at a line end; what follows goes to `kept`."""
    seen = 0
    for block in it:
        if seen >= head:
            kept.append(block)
            return
        seen += len(block)
        if seen < head:
            yield block
            continue
        cut = block.rfind(b"\n") + 1  # the head ends at a line end; the rest may be skipped
        if cut:
            yield block[:cut]
        if block[cut:]:
            kept.append(block[cut:])


def _keep_tail(it: Iterator[bytes], kept: deque[bytes], tail: int) -> tuple[int, int]:
    """Read the rest, keeping the blocks of the last `tail` bytes; (lines, bytes) dropped before them."""
    size = sum(len(b) for b in kept)
    gap_lines = gap_size = 0
    for block in it:
        kept.append(block)
        size += len(block)
        while size - len(kept[0]) >= tail:
            dropped = kept.popleft()
            size -= len(dropped)
            gap_lines += dropped.count(b"\n")
            gap_size += len(dropped)
    return gap_lines, gap_size


def _start_on_a_line(kept: deque[bytes], gap_lines: int, gap_size: int) -> Gap:
    """Start the tail on a whole line: the rest of the line cut in two is skipped too."""
    while kept:
        first = kept.popleft()
        nl = first.find(b"\n") + 1
        if nl:
            gap_lines, gap_size = gap_lines + 1, gap_size + nl
            if first[nl:]:
                kept.appendleft(first[nl:])
            break
        gap_size += len(first)
    return Gap(gap_lines, gap_size)


class _Long:
    """A line too long to keep: its first LINE_HEAD bytes, its last LINE_TAIL bytes, and how much is between."""

    def __init__(self, start: bytes, line: int) -> None:
        self.head, self.tail, self.dropped, self.line = start[:LINE_HEAD], b"", 0, line
        self.add(start[LINE_HEAD:])

    def add(self, data: bytes) -> None:
        if len(data) >= LINE_TAIL:
            self.dropped += len(self.tail) + len(data) - LINE_TAIL
            self.tail = data[-LINE_TAIL:]
        else:
            joined = self.tail + data
            self.dropped += max(0, len(joined) - LINE_TAIL)
            self.tail = joined[-LINE_TAIL:]

    def finish(self, cuts: Cuts) -> bytes:
        _record(cuts, self.line, self.dropped)
        return strip_ansi(self.head) + _marker(self.dropped) + strip_ansi(self.tail)


def _marker(dropped: int) -> bytes:
    return f" … [{dropped:,} bytes cut] … ".encode()


def _record(cuts: Cuts, line: int, dropped: int) -> None:
    if not cuts.long_lines:
        cuts.first_long_line = line
    cuts.long_lines += 1
    cuts.long_bytes += dropped


def strip_ansi(data: bytes) -> bytes:
    """`data` without escape sequences, stripped a line-aligned MiB at a time: a storm of millions of sequences
    in one pass would build millions of pieces at once."""
    if b"\x1b" not in data:
        return data
    out, pos = [], 0
    while pos < len(data):
        end = data.find(b"\n", pos + STRIP_STEP) + 1 or len(data)
        out.append(_ANSI_BYTES.sub(b"", data[pos:end]))
        pos = end
    return b"".join(out)


def shorten_long_lines(data: bytes, line: int, cuts: Cuts) -> bytes:
    """`data` (starting at line `line`) with every line longer than LINE_MAX cut to its head and tail.

    Any such line holds a whole window of LINE_MAX // 2 bytes without a newline on a grid of that step, so a
    few `find` calls per window (not one per line) find them all."""
    step, n = LINE_MAX // 2, len(data)
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos + step <= n:
        if data.find(b"\n", pos, pos + step) >= 0:
            pos += step
            continue
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos + step)
        end = n if end < 0 else end
        if end - start > LINE_MAX:
            spans.append((start, end))
        pos = end + 1
    if not spans:
        return data
    out, last = [], 0
    for start, end in spans:
        dropped = end - start - LINE_HEAD - LINE_TAIL
        _record(cuts, line + data.count(b"\n", 0, start), dropped)
        out += [data[last : start + LINE_HEAD], _marker(dropped), data[end - LINE_TAIL : end]]
        last = end
    out.append(data[last:])
    return b"".join(out)


def lines(pieces: Iterable[bytes | Gap], cuts: Cuts) -> Iterator[bytes | Gap]:
    """Line-aligned chunks (each ends with a newline but the log's last), long lines shortened, escapes
    stripped; Gaps passed through and recorded in `cuts`."""
    line = 1  # number of the first line not yet yielded
    pending = b""
    long: _Long | None = None

    def emit(data: bytes) -> bytes:
        nonlocal line
        data = strip_ansi(shorten_long_lines(data, line, cuts))  # shortened first: stripping is then bounded
        line += data.count(b"\n")
        return data

    for piece in pieces:
        if isinstance(piece, Gap):
            skipped = piece.lines
            if long is not None or pending:  # a line longer than the head itself: the gap took its end
                last = long.finish(cuts) if long is not None else emit(pending)
                long, pending = None, b""
                if skipped:  # its newline is in the gap: count it here instead
                    skipped -= 1
                    line += 1
                    last += b"\n"
                yield last
            cuts.skipped_from, cuts.skipped_lines, cuts.skipped_bytes = line, skipped, piece.size
            line += skipped
            yield Gap(skipped, piece.size)
            continue
        data = piece
        if long is not None:
            nl = data.find(b"\n")
            if nl < 0:
                long.add(data)
                continue
            long.add(data[:nl])
            yield long.finish(cuts) + b"\n"
            line, long, data = line + 1, None, data[nl + 1 :]
        data = pending + data if pending else data
        cut = data.rfind(b"\n") + 1
        body, pending = data[:cut], data[cut:]
        if body:
            yield emit(body)
        if len(pending) > LINE_MAX:
            long, pending = _Long(pending, line), b""
    if long is not None:
        yield long.finish(cuts)
    elif pending:
        yield emit(pending)
