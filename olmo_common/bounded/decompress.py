"""Decompress gzip, bz2 and xz streams within a memory budget.

    text = decompressed(raw, "xz")    # a binary stream of the decompressed bytes; read it in bounded pieces

Output is read by the caller in pieces it bounds (diagnose stops after a cap), so what is left is the memory the
format itself asks for. gzip's window is 32 KiB and bz2's block at most 900 kB by format, but an xz header
declares its dictionary, up to 1.5 GiB, and the decoder allocates it before the first byte comes out. xz is
therefore decoded with a memory limit (XZ_MEMLIMIT, twice what `xz -9` needs): a header asking for more is
refused (`TooMuchMemory`, an OSError) instead of allocated. Concatenated xz streams (`cat a.xz b.xz`) are read
in sequence, and stream padding skipped, as `xz -d` and lzma.LZMAFile do.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
from typing import BinaryIO, cast

from olmo_common.bounded.files import size_text

XZ_MEMLIMIT = 128 << 20  # `xz -9` (64 MiB dictionary) needs 65 MiB to decompress
_STEP = 64 << 10


class TooMuchMemory(OSError):
    """A compressed stream whose header asks for more memory than the budget allows."""

    def __str__(self) -> str:
        return str(self.strerror)


class _Xz(io.RawIOBase):
    """xz data decoded with a memory limit, stream after stream."""

    def __init__(self, raw: BinaryIO, memlimit: int) -> None:
        self._raw, self._memlimit = raw, memlimit
        self._dec = self._new()
        self._started = False  # has the current stream decoded anything yet?
        self._finished = 0  # streams read to their end

    def _new(self) -> lzma.LZMADecompressor:
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=self._memlimit)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:
            if self._dec.eof and not self._next_stream():
                return 0
            out = self._step(len(buffer))
            if out is None:
                return 0
            if out:
                buffer[: len(out)] = out
                return len(out)

    def _step(self, size: int) -> bytes | None:
        """Up to `size` decoded bytes (maybe none yet); None when what follows a finished stream is not xz."""
        data = self._raw.read(_STEP) if self._dec.needs_input else b""
        if not data and self._dec.needs_input:
            raise EOFError("the xz data ends before its end-of-stream marker")
        try:
            out = self._dec.decompress(data, max_length=size)
        except lzma.LZMAError as e:
            if "memory usage limit" in str(e).lower():
                raise TooMuchMemory(errno.ENOMEM, f"its xz header asks for more than {size_text(self._memlimit)} "
                                    "of memory to decompress (more than any xz preset uses)") from None
            if self._finished and not self._started:
                return None  # trailing data after the last stream ends the text, as lzma.LZMAFile does
            raise
        self._started = True
        return out

    def _next_stream(self) -> bool:
        """Start the stream after a finished one; False at the end of the data."""
        self._finished += 1
        rest = self._dec.unused_data
        while True:
            rest = rest.lstrip(b"\0")  # stream padding
            if rest:
                break
            more = self._raw.read(_STEP)
            if not more:
                return False
            rest = more
        self._dec, self._started = self._new(), False
        self._raw = cast(BinaryIO, _Prepend(rest, self._raw))
        return True


class _Prepend(io.RawIOBase):
    """A stream with some bytes put back in front of it."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self._head:
            data, self._head = (self._head, b"") if size < 0 or size >= len(self._head) else \
                (self._head[:size], self._head[size:])
            return data
        return self._rest.read(size)

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def decompressed(raw: BinaryIO, fmt: str, *, xz_memlimit: int = XZ_MEMLIMIT) -> BinaryIO:
    """The decompressed bytes of `raw` ("gzip", "bz2" or "xz") as a binary stream (closing it leaves `raw` open,
    as gzip.GzipFile and bz2.BZ2File do with a file object)."""
    if fmt == "gzip":
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw))
    if fmt == "bz2":
        return cast(BinaryIO, bz2.BZ2File(raw))
    if fmt == "xz":
        return cast(BinaryIO, io.BufferedReader(_Xz(raw, xz_memlimit)))
    raise ValueError(f"unknown compression {fmt!r}")
