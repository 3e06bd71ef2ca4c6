"""Opening a prepare-data input as a stream of its (decompressed) bytes, with a cap on how many it may yield.

`.gz` goes through the stdlib's gzip, `.zst` through `zstandard` (the `[zstd]` extra) with its decoder's window
capped at 128 MiB (zstd's own command-line default), so a frame that declares a huge window is refused instead of
allocated. zstandard's stream reader ends quietly on a file cut short, so `ZstdFrames` follows the frame and block
headers as the bytes pass and says whether the stream ended on a frame boundary, as gzip's EOFError does.

A compressed file may yield at most `limit` bytes (`--max-decompressed`; by default 200 times its size and at
least 1 GiB: text compresses 3 to 10 times, a decompression bomb hundreds to thousands of times), and reading
stops with one line naming the option past that, so a small file cannot keep the reader busy for hours.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO, Any

from olmo.errors import OlmoError

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
ZSTD_MAX_WINDOW = 1 << 27
AUTO_RATIO, AUTO_FLOOR = 200, 1 << 30
COMPRESSED = (".gz", ".zst")


def is_compressed(path: Path) -> bool:
    return path.name.endswith(COMPRESSED)


def default_limit(path: Path, size: int) -> int:
    """The decompressed-bytes cap of a compressed file of `size` bytes when --max-decompressed is not given."""
    return max(AUTO_FLOOR, AUTO_RATIO * size)


def zstandard() -> Any:
    """The zstandard module, or one line saying which extra to install."""
    try:
        import zstandard as zstd
    except ImportError:
        raise OlmoError("reading .zst inputs needs the zstandard package: pip install 'olmo-doctor[zstd]'") from None
    return zstd


class ZstdFrames:
    """Walks zstd frame headers (RFC 8878 section 3.1) over bytes fed in order; `complete` is true when they end
    exactly after a whole frame (or before any). Only headers are parsed; block contents are skipped by their
    declared sizes."""

    def __init__(self) -> None:
        self.state, self.need, self.skip, self.buf = "magic", 4, 0, b""
        self.checksum = False
        self.frames = 0

    @property
    def complete(self) -> bool:
        return self.state == "magic" and not self.buf and not self.skip

    def feed(self, data: bytes) -> None:
        pos = 0
        while pos < len(data) and self.state != "unknown":
            if self.skip:
                take = min(self.skip, len(data) - pos)
                self.skip -= take
                pos += take
                continue
            take = min(self.need - len(self.buf), len(data) - pos)
            self.buf += data[pos:pos + take]
            pos += take
            if len(self.buf) == self.need:
                header, self.buf = self.buf, b""
                getattr(self, "_" + self.state)(header)

    def _then(self, state: str, need: int, skip: int = 0) -> None:
        self.state, self.need, self.skip = state, need, skip

    def _magic(self, field: bytes) -> None:
        number = int.from_bytes(field, "little")
        if field == ZSTD_MAGIC:
            self._then("descriptor", 1)
        elif number in ZSTD_SKIPPABLE:
            self._then("skippable", 4)
        else:
            self._then("unknown", 1)  # not zstd: the decoder says so in its own words

    def _skippable(self, field: bytes) -> None:
        self.frames += 1
        self._then("magic", 4, int.from_bytes(field, "little"))

    def _descriptor(self, field: bytes) -> None:
        fhd = field[0]
        single = bool(fhd & 0x20)
        self.checksum = bool(fhd & 0x04)
        fcs = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        rest = (0 if single else 1) + (0, 1, 2, 4)[fhd & 0x03] + fcs
        self._then("header", rest) if rest else self._then("block", 3)

    def _header(self, field: bytes) -> None:
        self._then("block", 3)

    def _block(self, field: bytes) -> None:
        word = int.from_bytes(field, "little")
        last, kind, size = word & 1, (word >> 1) & 3, word >> 3
        body = 1 if kind == 1 else size  # an RLE block stores one byte
        if not last:
            self._then("block", 3, body)
        elif self.checksum:
            self._then("checksum", 4, body)
        else:
            self.frames += 1
            self._then("magic", 4, body)

    def _checksum(self, field: bytes) -> None:
        self.frames += 1
        self._then("magic", 4)


class _Tee:
    """A binary file whose reads also feed a ZstdFrames walker."""

    def __init__(self, raw: IO[bytes], frames: ZstdFrames):
        self.raw, self.frames = raw, frames

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.frames.feed(data)
        return data


class Decompressed:
    """`read(n)` the decompressed bytes of a `.gz` / `.zst` file (or the bytes of a plain one), at most `limit` in
    all for a compressed file; `raw_pos()` is how far into the file as stored the reader has got (for progress)."""

    def __init__(self, path: Path, raw: IO[bytes], limit: int | None):
        self.path, self.raw, self.limit, self.count = path, raw, limit, 0
        self.frames: ZstdFrames | None = None
        if path.name.endswith(".gz"):
            self.f: Any = gzip.GzipFile(fileobj=raw)
        elif path.name.endswith(".zst"):
            self.frames = ZstdFrames()
            dctx = zstandard().ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
            self.f = dctx.stream_reader(_Tee(raw, self.frames), read_across_frames=True, closefd=False)
        else:
            self.f, self.limit = raw, None

    def raw_pos(self) -> int:
        return self.raw.tell()

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        self.count += len(data)
        if self.limit is not None and self.count > self.limit:
            raise OlmoError(f"input {self.path}: decompresses to more than {self.limit:,} bytes (a "
                            f"{self.raw_pos():,}-byte file so far); if it really holds that much text, raise "
                            "--max-decompressed (e.g. --max-decompressed 500G)")
        if not data and self.frames is not None and not self.frames.complete and self.frames.state != "unknown":
            raise EOFError("zstd stream cut short")
        return data
