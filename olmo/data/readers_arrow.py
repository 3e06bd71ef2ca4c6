"""Parquet files and Arrow IPC files (what Hugging Face `datasets`' `save_to_disk` writes) as prepare-data tasks.

Both go through pyarrow (the `[parquet]` / `[datasets]` extras), one record batch at a time, only the text column:
a Parquet file page by page (`buffer_size`, no pre-buffering of whole row groups), an Arrow stream message by
message from ordinary reads (not a memory map, whose pages would all count against the process once touched).
The text column is `--text-field` (a dotted path reaches into struct columns); it must hold strings or binary
(binary values are decoded like any other bytes). A null value is a bad record; a value over --max-doc-size is
passed over and counted by its length alone, never turned into a Python string. A Parquet file whose text column
declares more than --max-decompressed bytes is refused before any of it is read.

Records are numbered by row, from 1, over the whole file (the resume point of a shard is a row).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from olmo.data import text_decode
from olmo.data.compressed import default_limit
from olmo.data.readers import Progress, ReadOptions
from olmo.data.tasks import PASSED_OVER, VALUES, Task
from olmo.errors import OlmoError, one_line

EXTRA = {"parquet": "parquet", "arrow": "datasets"}
MAX_BATCH_ROWS = 1 << 16
PROBE_ROWS = 64
TARGET_BATCH_BYTES = 1 << 20


def pyarrow(kind: str) -> Any:
    """The pyarrow module, or one line saying which extra to install."""
    try:
        import pyarrow as pa
        import pyarrow.compute  # submodules pyarrow does not import itself
        import pyarrow.parquet
    except ImportError:
        raise OlmoError(f"reading .{kind} inputs needs pyarrow: pip install 'olmo-doctor[{EXTRA[kind]}]'") from None
    return pa


def tasks(i: int, path: Path, kind: str, skip: int, size: int, progress: Progress,
          opts: ReadOptions) -> Iterator[Task]:
    pa = pyarrow(kind)
    try:
        with pa.OSFile(str(path)) as f:
            file_size = f.size()
            read = _parquet if kind == "parquet" else _ipc
            yield from _Values(i, path, skip, size, progress, opts).tasks(pa, read(pa, path, f, file_size, opts),
                                                                           file_size)
    except (pa.ArrowException, OSError) as e:
        raise OlmoError(f"input {path}: cannot read it as {'Parquet' if kind == 'parquet' else 'Arrow'} data "
                        f"({one_line(str(e))[:300]})") from None


def _field_error(path: Path, opts: ReadOptions, names: list[str]) -> OlmoError:  # a column that is not there
    return OlmoError(f"input {path} has no text column '{'.'.join(opts.field)}' (its columns: "
                     f"{', '.join(names[:20])}); pass --text-field NAME")


def _parquet(pa: Any, path: Path, f: Any, file_size: int, opts: ReadOptions) -> Iterator[tuple[Any, int]]:
    """(record batch's text column, input bytes it covers, by rows' share of the file). A top-level column is
    read dictionary-encoded where the file stores it so (a value many rows use is held once, never expanded), in
    batches of about 1 MiB of text (`_batch_rows`)."""
    dotted = ".".join(opts.field)
    schema = pa.parquet.ParquetFile(f).schema_arrow
    _check_type(pa, path, _dig(schema, opts.field), schema.names, opts)  # before pyarrow sees the name: KeyError
    # (pyarrow cannot return a dictionary-encoded field of a struct in batches that span row groups)
    keep_dictionary = [dotted] if len(opts.field) == 1 else None
    pf = pa.parquet.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False, read_dictionary=keep_dictionary)
    meta = pf.metadata
    declared = _declared(meta, dotted)
    limit = opts.max_decompressed or default_limit(path, file_size)
    if sum(declared) > limit:
        raise _too_big(path, sum(declared), limit)
    rows, done = max(meta.num_rows, 1), 0
    per_row = max([d // max(meta.row_group(r).num_rows, 1) for r, d in enumerate(declared)], default=1)
    for batch in pf.iter_batches(batch_size=_batch_rows(pa, pf, dotted, opts, per_row), columns=[dotted]):
        column = _dig_array(pa, batch.column(0), opts.field[1:])
        covered = file_size * (done + batch.num_rows) // rows - file_size * done // rows
        done += batch.num_rows
        yield column, covered


def _declared(meta: Any, dotted: str) -> list[int]:
    """Per row group, the bytes the metadata says the text column takes decompressed."""
    def ours(path: str) -> bool:
        return path == dotted or path.startswith(dotted + ".")

    return [sum(meta.row_group(r).column(c).total_uncompressed_size for c in range(meta.num_columns)
                if ours(meta.row_group(r).column(c).path_in_schema)) for r in range(meta.num_row_groups)]


def _batch_rows(pa: Any, pf: Any, dotted: str, opts: ReadOptions, declared_per_row: int) -> int:
    """Rows per batch: about TARGET_BATCH_BYTES of text at the larger of the first rows' size and the largest
    size per row any row group's metadata declares (plain-encoded text is that large once read)."""
    probe = next(pf.iter_batches(batch_size=PROBE_ROWS, columns=[dotted]), None)
    if probe is None or not probe.num_rows:
        return PROBE_ROWS
    lengths = _lengths(pa, _dig_array(pa, probe.column(0), opts.field[1:]))
    per_row = max(1, declared_per_row, int(np.minimum(lengths, opts.max_doc).sum()) // probe.num_rows)
    return int(min(MAX_BATCH_ROWS, max(1, TARGET_BATCH_BYTES // per_row)))


def _too_big(path: Path, size: int, limit: int) -> OlmoError:
    return OlmoError(f"input {path}: its text column decompresses to {'more than ' if size < 0 else ''}"
                     f"{abs(size) if size >= 0 else limit:,} bytes, over the {limit:,}-byte limit; if it really "
                     "holds that much text, raise --max-decompressed")


def _ipc(pa: Any, path: Path, f: Any, file_size: int, opts: ReadOptions) -> Iterator[tuple[Any, int]]:
    """(record batch's text column, input bytes it covers) of an Arrow stream (datasets' format) or file."""
    if f.read(6) == b"ARROW1":
        reader = pa.ipc.open_file(f)
        n = max(reader.num_record_batches, 1)
        batches: Iterator[Any] = (reader.get_batch(k) for k in range(reader.num_record_batches))
    else:
        f.seek(0)
        reader = pa.ipc.open_stream(f)
        n = 0
        batches = iter(reader)
    _check_type(pa, path, _dig(reader.schema, opts.field), reader.schema.names, opts)
    pos = f.tell()
    for k, batch in enumerate(batches):
        column = _dig_array(pa, batch.column(opts.field[0]), opts.field[1:])
        if n:  # the file format: by batches' share of the file
            yield column, file_size * (k + 1) // n - file_size * k // n
        else:
            yield column, f.tell() - pos
            pos = f.tell()


def _dig(schema_or_type: Any, field: tuple[str, ...]) -> Any:
    """The type at a dotted path in a schema / struct type, None when there is none."""
    node = schema_or_type
    for name in field:
        index = node.get_field_index(name) if hasattr(node, "get_field_index") else -1
        if index < 0:
            return None
        node = node.field(index).type
    return node


def _dig_array(pa: Any, column: Any, rest: tuple[str, ...]) -> Any:
    for name in rest:
        column = pa.compute.struct_field(column, [name])
    return column


class _Values:
    """Cuts record batches into VALUES tasks of about `size` bytes of text."""

    def __init__(self, i: int, path: Path, skip: int, size: int, progress: Progress, opts: ReadOptions):
        self.i, self.path, self.skip, self.size, self.progress, self.opts = i, path, skip, size, progress, opts
        self.row = 1  # record number of the next row
        self.done = 0  # input bytes accounted for
        self.text = 0  # bytes of text seen (decoded: a dictionary's value counts each time it is used)
        self.limit = 0

    def tasks(self, pa: Any, batches: Iterator[tuple[Any, int]], file_size: int) -> Iterator[Task]:
        self.limit = self.opts.max_decompressed or default_limit(self.path, file_size)
        for column, covered in batches:
            yield from self._batch(pa, column, covered)
        if self.progress and file_size > self.done:
            self.progress(file_size - self.done)

    def _batch(self, pa: Any, arr: Any, covered: int) -> Iterator[Task]:
        n = len(arr)
        lengths = _lengths(pa, arr)
        self.text += int(lengths.sum())
        if self.text > self.limit:
            raise _too_big(self.path, -1, self.limit)
        bounds = _cuts(lengths, self.size)
        over = lengths > self.opts.max_doc
        encoding = self.opts.encoding or text_decode.UTF8
        for a, b in itertools.pairwise(bounds):
            share = covered * b // n - covered * a // n
            first = self.row + a
            if first + (b - a) - 1 <= self.skip:  # written by an earlier run
                if self.progress and share:
                    self.progress(share)
            else:
                n_over = int(np.count_nonzero(over[a:b] & (np.arange(first, first + b - a) > self.skip)))
                yield Task(self.i, VALUES, _values(pa, arr, a, b, over), first, self.skip, share, encoding, n_over)
            self.done += share
        if n == 0 and self.progress and covered:
            self.progress(covered)
            self.done += covered
        self.row += n


def _cuts(lengths: np.ndarray, size: int) -> list[int]:
    """Row bounds [0, ..., n] cutting rows of these lengths into runs of about `size` bytes."""
    n = len(lengths)
    cum = np.cumsum(lengths)
    cuts = np.searchsorted(cum, np.arange(size, int(cum[-1]) if n else 0, size), side="right")
    return sorted({0, n, *(int(c) for c in cuts if 0 < c < n)})


def _lengths(pa: Any, arr: Any) -> np.ndarray:
    """Each value's length in bytes (0 for null), from the offsets alone: no value is read."""
    if pa.types.is_dictionary(arr.type):
        lengths = pa.compute.binary_length(arr.dictionary).take(arr.indices)
    else:
        lengths = pa.compute.binary_length(arr)
    return np.asarray(lengths.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _check_type(pa: Any, path: Path, t: Any, names: list[str], opts: ReadOptions) -> None:
    """Refuse a missing text column, or one that does not hold text, in one line."""
    if t is None:
        raise _field_error(path, opts, names)
    t = t.value_type if pa.types.is_dictionary(t) else t
    text = (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or getattr(pa.types, "is_string_view", lambda _: False)(t)
            or getattr(pa.types, "is_binary_view", lambda _: False)(t))
    if not text:
        raise OlmoError(f"input {path}: column '{'.'.join(opts.field)}' holds {t}, not text; pass --text-field "
                        "NAME of a string column")


def _values(pa: Any, arr: Any, a: int, b: int, over: np.ndarray) -> list[Any]:
    """Rows a..b as Python values, PASSED_OVER in place of those over the cap (never materialised). A dictionary
    slice is decoded alone (its dictionary may hold the whole row group's values)."""
    part = arr.slice(a, b - a)
    skipped = np.flatnonzero(over[a:b])
    keep = np.ones(b - a, dtype=bool)
    keep[skipped] = False
    if len(skipped):
        part = part.filter(pa.array(keep))
    if pa.types.is_dictionary(part.type):
        part = part.dictionary.take(part.indices)
    if not len(skipped):
        return list(part.to_pylist())
    values: list[Any] = [PASSED_OVER] * (b - a)
    for k, v in zip(np.flatnonzero(keep), part.to_pylist(), strict=True):
        values[int(k)] = v
    return values
