"""Read a log of any size and encoding as text chunks that end on line boundaries, in bounded time and memory.

Logs arrive as files, pipes, gzip/bz2/xz files, UTF-8 or UTF-16 (PowerShell's `>`), with ANSI colours,
carriage-return progress bars and tool prefixes (pip's `│`, docker build's `#12 3.456`, mpirun's
`[1,0]<stdout>:`). Reading is streamed in blocks; what a hostile or runaway input could make unbounded is cut, and
every cut is recorded in `Cuts` so the output can say what was left out (`window` does the cutting):

- decompression stops after `max_decompressed` bytes (a 10 GiB gzip bomb is not inflated to the end), and xz
  data whose header asks for a huge dictionary is refused before it is allocated (bounded.decompress);
- a FIFO, socket or device given as the log is refused at once (standard input, `-`, is the way to pipe a log);
- reading stops after MAX_READ bytes of text;
- of a log longer than SCAN_HEAD + SCAN_TAIL, the middle is skipped (counted, not scanned);
- a line longer than LINE_HEAD + LINE_TAIL keeps its first and last bytes.

An empty or binary input is refused with one clear line.
"""

from __future__ import annotations

import codecs
import io
import lzma
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, cast

from olmo_common.bounded.decompress import decompressed
from olmo_common.bounded.files import FIFO, ReadRefused, open_regular
from olmo_doctor.diagnose.window import ANSI, Cuts, Gap, lines, window
from olmo_doctor.errors import UsageError

BLOCK = 16 << 20  # 16 MiB of bytes per chunk: few Python-level passes, bounded memory
HEAD = 64 << 10
MAX_READ = 1 << 30  # bytes of text read at most, from any source
MAX_DECOMPRESSED = 256 << 20  # text a compressed log may expand to, at least ...
MAX_RATIO = 20  # ... or this many times its compressed size (real logs compress about 5-15x), up to MAX_READ

# Prefixes tools put before each line of a subprocess's output; removed before quoting and matching.
PREFIX = re.compile(
    r"^(?:"
    r"#\d{1,6} \d{1,7}\.\d{1,3} "  # docker buildkit: `#12 3.456 `
    r"|\[\d{1,6},\d{1,6}\]<std(?:out|err)>:"  # mpirun / horovodrun: `[1,0]<stdout>:`
    r"|[ \t]{0,64}[│║┃] ?"  # pip >= 23 subprocess output box: `      │ `
    r"){1,8}"
)
COLLECT_HINT = "give the text output of the failed command, e.g. `pip install ... 2>&1 | tee build.log`"
_MAGIC: tuple[tuple[bytes, str], ...] = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"))


def clean(line: str) -> str:
    """A log line as a person would read it: without tool prefixes, ANSI codes or progress-bar redraws."""
    if "\r" in line:  # a progress bar redraws with CR: the last non-empty redraw is what the terminal showed
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    return unprefix(line).rstrip()


def unprefix(line: str) -> str:
    """The line without the tool prefixes at its start (a match at 0: `sub` would try every position)."""
    m = PREFIX.match(line)
    return line[m.end():] if m else line


_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _utf16_without_bom(sample: bytes) -> str | None:
    """UTF-16 without a BOM: every other byte of ASCII text is NUL."""
    odd, even = sample[1::2].count(0), sample[0::2].count(0)
    if odd > 0.9 * len(sample[1::2]) and even < 0.05 * len(sample[0::2]):
        return "utf-16-le"
    if even > 0.9 * len(sample[0::2]) and odd < 0.05 * len(sample[1::2]):
        return "utf-16-be"
    return None


def _controls(sample: bytes) -> int:
    """Control bytes other than tab, newline, form feed, carriage return, escape and backspace."""
    return sum(sample.count(b) for b in range(32) if b not in (9, 10, 12, 13, 27, 8))


def _detect(head: bytes, name: str) -> str:
    """The codec of a log from its first bytes; UsageError for empty or binary input."""
    if not head.strip():
        raise UsageError(f"{name} is empty; {COLLECT_HINT}")
    codec = next((codec for bom, codec in _BOMS if head.startswith(bom)), None)
    if codec is not None:
        return codec
    sample = head[:HEAD]
    zeros = sample.count(0)
    if zeros > len(sample) // 4 and (codec := _utf16_without_bom(sample)) is not None:
        return codec
    if zeros or _controls(sample) > len(sample) // 20:
        raise UsageError(f"{name} is binary data, not a text log; {COLLECT_HINT}")
    return "utf-8"


def _open(source: str | Path) -> tuple[BinaryIO, str]:
    if str(source) == "-":
        return sys.stdin.buffer, "standard input"
    path = Path(source)
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give a log file (or - for standard input)")
    try:
        return open_regular(path), str(path)
    except ReadRefused as e:  # a FIFO would block: what a pipe holds comes through standard input instead
        pipe = "; pipe it to standard input instead: `... | olmo-doctor diagnose -`" if e.special == FIFO else ""
        raise UsageError(f"cannot read {path}: it is {e.strerror}{pipe}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None


class _Prepend(io.RawIOBase):
    """A stream whose first bytes were already read (to sniff the format) and are put back in front."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._head[: len(buffer)] if self._head else self._rest.read(len(buffer))
        self._head = self._head[len(data):] if self._head else b""
        buffer[: len(data)] = data
        return len(data)


def _compressed_size(stream: BinaryIO) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None


def _decompress(stream: BinaryIO) -> tuple[BinaryIO, bytes, int, str]:
    """(text stream, its first bytes, how many bytes of it may be read, the format) for a plain or compressed
    log; the limit on a compressed one grows with its size, so a bomb stops early and a big real log does not."""
    head = stream.read(HEAD)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            raw = cast(BinaryIO, io.BufferedReader(_Prepend(head, stream)))
            # closed with the stream it wraps, in LogReader.__iter__
            inner = decompressed(raw, kind)
            size = _compressed_size(stream)
            limit = min(MAX_READ, max(MAX_DECOMPRESSED, MAX_RATIO * size if size else 0))
            return inner, inner.read(HEAD), limit, kind
    return stream, head, MAX_READ, ""


# What a file name says about its bytes: the formats read here, and others that are refused by name rather than
# read as binary noise. A name that says one and bytes that are another (a plain log called .gz) are refused.
_NAMED = {".gz": "gzip", ".gzip": "gzip", ".tgz": "gzip", ".bz2": "bz2", ".xz": "xz", ".zst": "zstd",
          ".zstd": "zstd", ".lz4": "lz4", ".lzma": "lzma", ".lz": "lzip", ".zip": "zip", ".7z": "7z", ".br": "brotli"}


def _check_name(kind: str, name: str) -> None:
    """UsageError when `name` says a compression that the data is not (or one diagnose does not read)."""
    said = _NAMED.get(os.path.splitext(name)[1].lower())
    if said is None or said == kind:
        return
    if said not in {kind for _, kind in _MAGIC}:
        raise UsageError(f"{name}: diagnose reads plain, gzip, bz2 and xz logs, not {said}; decompress it first")
    what = f"{kind} data" if kind else "not compressed"
    raise UsageError(f"{name} is not {said} data (its name says so, but it is {what}); rename it to what it is, "
                     f"or {COLLECT_HINT}")


def _read(stream: BinaryIO, size: int, label: str) -> bytes:
    try:
        return stream.read(size)
    except (OSError, EOFError, lzma.LZMAError, ValueError) as e:
        raise UsageError(f"cannot read {label}: {e}") from None


class LogReader:
    """The log as UTF-8 bytes, in chunks that each end with a newline (the last may not), ANSI codes removed.

    Iterate it once. Before each chunk is yielded, `line` is the number of the chunk's first line (it jumps over
    a skipped middle), and `cuts` says what was left out so far. UTF-8 input passes through undecoded (the scan
    decodes only the lines it quotes); other encodings are transcoded. UsageError for a missing, unreadable,
    empty or binary input.
    """

    def __init__(self, source: str | Path | BinaryIO, name: str | None = None) -> None:
        self.source, self.name = source, name
        self.line = 1
        self.cuts = Cuts()

    def __iter__(self) -> Iterator[bytes]:
        if isinstance(self.source, (str, Path)):
            stream, label = _open(self.source)
        else:
            stream, label = self.source, self.name or "the log"
        try:
            try:
                text, head, limit, kind = _decompress(stream)
            except (OSError, EOFError, lzma.LZMAError) as e:
                raise UsageError(f"cannot read {label}: {e}") from None
            _check_name(kind, self.name or label)
            codec = _detect(head, self.name or label)
            blocks = self._blocks(text, head, codec, limit, kind, label)
            for piece in lines(window(blocks), self.cuts):
                if isinstance(piece, Gap):
                    self.line += piece.lines
                    continue
                yield piece
                self.line += piece.count(b"\n")
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()

    def _blocks(self, stream: BinaryIO, head: bytes, codec: str, limit: int, kind: str,
                label: str) -> Iterator[bytes]:
        """UTF-8 blocks of the text, at most `limit` bytes of it read. Compressed data that turns out cut or
        damaged after its start ends the text there (noted): what came before is still a log worth reading."""
        transcode = codecs.getincrementaldecoder(codec)(errors="replace") if codec != "utf-8" else None
        # the sniffed head and the first block make one block, so the scan samples a large start
        block = head
        if len(head) == HEAD:
            more, broken = self._read_some(stream, BLOCK - len(head), kind, label)
            block += more
        else:
            broken = None
        taken = 0
        while block:
            taken += len(block)
            yield transcode.decode(block).encode() if transcode else block
            if broken is not None:
                self.cuts.stopped_at, self.cuts.stop_reason = taken, broken
                break
            if taken >= limit:
                if self._read_some(stream, 1, kind, label)[0]:
                    self.cuts.stopped_at = taken
                    self.cuts.stop_reason = f"{kind} data expands further" if kind else "the log is longer"
                break
            block, broken = self._read_some(stream, min(BLOCK, limit - taken), kind, label)
        if transcode is not None and (rest := transcode.decode(b"", final=True).encode()):
            yield rest

    @staticmethod
    def _read_some(stream: BinaryIO, size: int, kind: str, label: str) -> tuple[bytes, str | None]:
        """Up to `size` bytes, and why reading stopped early when compressed data broke off (None otherwise);
        compressed data is read in small steps so a break loses little."""
        if not kind:
            return _read(stream, size, label), None
        pieces: list[bytes] = []
        got = 0
        while got < size:
            try:
                piece = stream.read(min(64 << 10, size - got))
            except (OSError, EOFError, lzma.LZMAError, ValueError) as e:
                return b"".join(pieces), f"the {kind} data is cut or damaged there ({e})"
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces), None


def iter_chunks(source: str | Path | BinaryIO, name: str | None = None) -> LogReader:
    """The log as line-aligned UTF-8 chunks (a LogReader: iterate it; see its `cuts` afterwards)."""
    return LogReader(source, name)
