"""prepare-data's readers: each input, streamed, as `Task`s of whole records (olmo/data/tasks.py).

- JSON lines (.jsonl, .json.gz, .jsonl.gz, .jsonl.zst, .json.zst): blocks of whole lines, read through
  olmo/data/compressed.py; the encoding is sniffed from the first bytes (text_decode.sniff) or given, and UTF-16/32
  lines are transcoded to UTF-8 here, so the workers always cut lines on b"\\n".
- .txt (also .gz / .zst): the whole file is one document.
- Parquet and Arrow (saved Hugging Face datasets): olmo/data/readers_arrow.py.

Memory stays bounded whatever the input: blocks are at most the task size, and a record longer than
`ReadOptions.max_doc` bytes (--max-doc-size) is never held whole: the reader passes over it, counting it, and goes
on with the next record (a .txt file over the cap is passed over entirely). A compressed file may decompress to at
most `max_decompressed` bytes (compressed.py). What is passed over depends only on the input, never on task sizes,
so the output stays identical for any number of workers.
"""

from __future__ import annotations

import codecs
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from olmo.data import text_decode
from olmo.data.compressed import Decompressed, default_limit, is_compressed
from olmo.data.tasks import AUTO, LINES, WHOLE, Task
from olmo.errors import OlmoError

DEFAULT_MAX_DOC = 32 << 20  # bytes of one record: far above any real document (a long book is ~5 MB)
Progress = Callable[[int], None] | None
KINDS = {".jsonl": LINES, ".jsonl.gz": LINES, ".json.gz": LINES, ".jsonl.zst": LINES, ".json.zst": LINES,
         ".txt": WHOLE, ".txt.gz": WHOLE, ".txt.zst": WHOLE, ".parquet": "parquet", ".arrow": "arrow"}


class ReadOptions(NamedTuple):
    field: tuple[str, ...] = ("text",)  # the text field (a dotted path into nested objects / struct columns)
    encoding: str | None = None  # None: detect (text_decode)
    max_doc: int = DEFAULT_MAX_DOC
    max_decompressed: int | None = None  # None: compressed.default_limit


DEFAULTS = ReadOptions()


class Sizes(NamedTuple):
    size: int  # bytes per block
    small: int  # bytes per block in the file's last `tail` bytes (as stored)
    tail: int


def kind_of(path: Path) -> str | None:
    return next((kind for suffix, kind in KINDS.items() if path.name.endswith(suffix)), None)


def file_tasks(i: int, path: Path, skip: int, sizes: Sizes, progress: Progress, opts: ReadOptions) -> Iterator[Task]:
    """The tasks of text input `i`, JSON lines or .txt (records up to `skip` are passed over, written by an earlier
    run). Parquet and Arrow inputs are read by olmo/data/readers_arrow.py, which imports this module."""
    kind = kind_of(path)
    try:
        with open(path, "rb") as raw:
            size = os.fstat(raw.fileno()).st_size
            limit = opts.max_decompressed or default_limit(path, size)
            src = Decompressed(path, raw, limit if is_compressed(path) else None)
            if kind == WHOLE:
                yield from _whole_tasks(i, src, skip, size, opts, progress)
            else:
                # a line inside a block is shorter than the block: with blocks of at most half the cap (UTF-16
                # grows by half as UTF-8), only a line that began in an earlier block can be over it
                sizes = Sizes(min(sizes.size, opts.max_doc // 2), min(sizes.small, opts.max_doc // 2), sizes.tail)
                yield from _LineReader(i, src, skip, opts, progress).tasks(_blocks(src, sizes, size))
    except _read_errors() as e:
        raise OlmoError(f"input {path}: {read_problem(e)}") from None


def _read_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
    zstd = sys.modules.get("zstandard")
    return (*errors, zstd.ZstdError) if zstd is not None else errors


def read_problem(e: BaseException) -> str:
    """What went wrong reading an input, in words: these are damaged or unreadable files, not bugs."""
    import gzip

    if isinstance(e, gzip.BadGzipFile):
        return "it is not gzip data; recompress it, or drop the .gz from its name if it is plain text"
    if isinstance(e, EOFError):
        return "its compressed data is cut short (an interrupted download or copy?); fetch or compress it again"
    if isinstance(e, zlib.error):
        return f"its gzip data is corrupt ({e}); fetch or compress it again"
    if not isinstance(e, OSError):  # zstandard.ZstdError
        if "memory" in str(e) or "window" in str(e).lower():
            return ("its zstd frames need a decoding window over 128 MiB (made with --long?); recompress it with "
                    "zstd's default window")
        return f"its zstd data is corrupt ({e}); fetch or compress it again"
    return f"cannot read it: {getattr(e, 'strerror', None) or e}"


def _read_upto(src: Decompressed, n: int) -> bytes:
    parts, got = [], 0
    while got < n and (data := src.read(n - got)):
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _drop_bom(data: bytes, encoding: str) -> bytes:
    """`data` without a leading byte-order mark of `encoding` itself (UTF-8's would reach the text as U+FEFF)."""
    found = text_decode.bom(data)
    if found and codecs.lookup(found[0]).name == codecs.lookup(encoding).name:
        return data[found[1]:]
    return data


def _whole_tasks(i: int, src: Decompressed, skip: int, size: int, opts: ReadOptions,
                 progress: Progress) -> Iterator[Task]:
    """A .txt file: one task with the whole file, or an empty one counting it as oversized."""
    if skip:  # its one record was written by an earlier run
        if progress:
            progress(size)
        return
    data = _read_upto(src, opts.max_doc + 1)
    if len(data) > opts.max_doc:
        yield Task(i, WHOLE, b"", 1, 0, size, AUTO, oversized=1)
        return
    encoding = opts.encoding or AUTO
    yield Task(i, WHOLE, data if encoding == AUTO else _drop_bom(data, encoding), 1, 0, size, encoding)


def _blocks(src: Decompressed, sizes: Sizes, file_size: int) -> Iterator[bytes]:
    """The file's (decompressed) bytes in blocks, smaller in its last `sizes.tail` bytes as stored."""
    small_from = file_size - sizes.tail
    while data := src.read(sizes.size if src.raw_pos() < small_from else sizes.small):
        yield data


class _LineReader:
    """Cuts a stream of blocks into tasks of whole lines, passing over (and counting) lines over the cap."""

    def __init__(self, i: int, src: Decompressed, skip: int, opts: ReadOptions, progress: Progress):
        self.i, self.src, self.skip, self.max_doc, self.progress = i, src, skip, opts.max_doc, progress
        self.given = opts.encoding
        self.line, self.over, self.undecodable, self.last = 1, 0, 0, 0
        self.encoding = text_decode.UTF8

    def tasks(self, blocks: Iterator[bytes]) -> Iterator[Task]:
        carry: list[bytes] = []  # the start of a line that began in an earlier block (parts: no quadratic joins)
        carried, passing = 0, False
        for block in self._decoded(blocks):
            if passing:  # inside a line over the cap: drop bytes up to its end
                nl = block.find(b"\n")
                if nl < 0:
                    continue
                block, passing = block[nl + 1:], False
                self._passed_over()
            cut = block.rfind(b"\n")
            if cut < 0:
                carry.append(block)
                carried += len(block)
                if carried > self.max_doc:
                    carry, carried, passing = [], 0, True
                continue
            first = block.find(b"\n")
            if carried + first > self.max_doc:
                self._passed_over()
                data = block[first + 1:cut + 1]
            else:
                data = b"".join([*carry, block[:cut + 1]])
            carry, carried = [block[cut + 1:]], len(block) - cut - 1
            yield from self._task(data, data.count(b"\n"))
        if passing:
            self._passed_over()
        rest = b"".join(carry)
        yield from self._task(rest, 1 if rest else 0, final=True)

    def _passed_over(self) -> None:
        self.over += self.line > self.skip
        self.line += 1

    def _task(self, data: bytes, lines: int, final: bool = False) -> Iterator[Task]:
        pos = self.src.raw_pos()
        if (data and self.line + lines - 1 > self.skip) or self.over or self.undecodable:
            yield Task(self.i, LINES, data, self.line, self.skip, pos - self.last, self.encoding, self.over,
                       self.undecodable)
            self.over = self.undecodable = 0
        elif self.progress and pos > self.last:
            self.progress(pos - self.last)
        self.last = pos
        self.line += lines

    def _decoded(self, blocks: Iterator[bytes]) -> Iterator[bytes]:
        """The blocks, without a BOM, transcoded to UTF-8 when the file's encoding cannot be cut on b"\\n"."""
        first = next(blocks, b"")
        encoding, drop = text_decode.sniff(first) if self.given is None else (self.given, 0)
        first = first[drop:] if drop else _drop_bom(first, encoding)
        if text_decode.ascii_compatible(encoding):
            self.encoding = encoding
            if first:
                yield first
            yield from blocks
            return
        decoder = codecs.getincrementaldecoder(encoding)(errors=text_decode.ERRORS)
        if first:
            yield self._transcode(decoder, first)
        for block in blocks:
            yield self._transcode(decoder, block)
        yield self._transcode(decoder, b"", final=True)

    def _transcode(self, decoder: codecs.IncrementalDecoder, block: bytes, final: bool = False) -> bytes:
        text, bad = text_decode.decode_more(decoder, block, final)
        self.undecodable += bad
        return text.encode("utf-8")
