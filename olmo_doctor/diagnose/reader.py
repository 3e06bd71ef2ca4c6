"""Read a log of any size and encoding as text chunks that end on line boundaries.

Logs arrive as files, pipes, gzip files, UTF-8 or UTF-16 (PowerShell's `>`), with ANSI colours, carriage-return
progress bars and tool prefixes (pip's `│`, docker build's `#12 3.456`, mpirun's `[1,0]<stdout>:`). Reading is
streamed in blocks so memory stays bounded; an empty or binary input is refused with one clear line.
"""

from __future__ import annotations

import codecs
import gzip
import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from olmo_doctor.errors import UsageError

BLOCK = 16 << 20  # 16 MiB of bytes per chunk: few Python-level passes, bounded memory
HEAD = 64 << 10
# A single "line" longer than this (a progress bar without newlines) is cut so memory stays bounded.
MAX_PENDING = 4 * BLOCK

ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# Prefixes tools put before each line of a subprocess's output; removed before quoting and matching.
PREFIX = re.compile(
    r"^(?:"
    r"#\d+ \d+\.\d+ "  # docker buildkit: `#12 3.456 `
    r"|\[\d+,\d+\]<std(?:out|err)>:"  # mpirun / horovodrun: `[1,0]<stdout>:`
    r"|\s*[│║┃] ?"  # pip >= 23 subprocess output box: `      │ `
    r")+"
)
COLLECT_HINT = "give the text output of the failed command, e.g. `pip install ... 2>&1 | tee build.log`"


def clean(line: str) -> str:
    """A log line as a person would read it: without tool prefixes, ANSI codes or progress-bar redraws."""
    if "\r" in line:  # a progress bar redraws with CR: the last non-empty redraw is what the terminal showed
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    return PREFIX.sub("", line).rstrip()


def _detect(head: bytes, name: str) -> str:
    """The codec of a log from its first bytes; UsageError for empty or binary input."""
    if not head.strip():
        raise UsageError(f"{name} is empty; {COLLECT_HINT}")
    for bom, codec in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"),
                       (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
                       (codecs.BOM_UTF16_BE, "utf-16")):
        if head.startswith(bom):
            return codec
    sample = head[:HEAD]
    zeros = sample.count(0)
    if zeros > len(sample) // 4:
        # UTF-16 without a BOM: every other byte of ASCII text is NUL
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd > 0.9 * len(sample[1::2]) and even < 0.05 * len(sample[0::2]):
            return "utf-16-le"
        if even > 0.9 * len(sample[0::2]) and odd < 0.05 * len(sample[1::2]):
            return "utf-16-be"
    control = sum(sample.count(b) for b in range(32) if b not in (9, 10, 12, 13, 27, 8))
    if zeros or control > len(sample) // 20:
        raise UsageError(f"{name} is binary data, not a text log; {COLLECT_HINT}")
    return "utf-8"


def _open(source: str | Path) -> tuple[BinaryIO, str]:
    if str(source) == "-":
        return sys.stdin.buffer, "standard input"
    path = Path(source)
    if path.is_dir():
        raise UsageError(f"{path} is a folder; give a log file (or - for standard input)")
    try:
        return path.open("rb"), str(path)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None


def _maybe_gunzip(stream: BinaryIO) -> tuple[BinaryIO, bytes]:
    head = stream.read(HEAD)
    if head[:2] == b"\x1f\x8b":
        gz = gzip.GzipFile(fileobj=_Prepend(head, stream))
        return gz, gz.read(HEAD)  # type: ignore[return-value]
    return stream, head


class _Prepend(io.RawIOBase):
    """A stream whose first bytes were already read (to sniff gzip) and are put back in front."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._head[: len(buffer)] if self._head else self._rest.read(len(buffer))
        self._head = self._head[len(data):] if self._head else b""
        buffer[: len(data)] = data
        return len(data)


def _read(stream: BinaryIO, size: int, label: str) -> bytes:
    try:
        return stream.read(size)
    except (OSError, EOFError) as e:
        raise UsageError(f"cannot read {label}: {e}") from None


def iter_chunks(source: str | Path | BinaryIO, name: str | None = None) -> Iterator[bytes]:
    """The log as UTF-8 bytes, in chunks that each end with a newline (the last may not), ANSI codes removed.

    UTF-8 input passes through undecoded (the scan decodes only the lines it quotes); other encodings are
    transcoded. UsageError for a missing, unreadable, empty or binary input.
    """
    if isinstance(source, (str, Path)):
        stream, label = _open(source)
    else:
        stream, label = source, name or "the log"
    try:
        try:
            stream, head = _maybe_gunzip(stream)
        except (OSError, EOFError) as e:
            raise UsageError(f"cannot read {label}: {e}") from None
        codec = _detect(head, name or label)
        transcode = codecs.getincrementaldecoder(codec)(errors="replace") if codec != "utf-8" else None
        pending = b""
        # the sniffed head and the first block make one chunk, so the scan samples a large start
        block = head + (_read(stream, BLOCK - len(head), label) if len(head) == HEAD else b"")
        while block:
            data = pending + (transcode.decode(block).encode() if transcode else block)
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) < MAX_PENDING:
                pending = data
            else:
                cut = cut or len(data)
                yield _strip_ansi(data[:cut])
                pending = data[cut:]
            block = _read(stream, BLOCK, label)
        tail = pending + (transcode.decode(b"", final=True).encode() if transcode else b"")
        if tail:
            yield _strip_ansi(tail)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


ANSI_BYTES = re.compile(ANSI.pattern.encode())


def _strip_ansi(data: bytes) -> bytes:
    return ANSI_BYTES.sub(b"", data) if b"\x1b" in data else data
