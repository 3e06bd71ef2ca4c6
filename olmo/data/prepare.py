"""`olmo prepare-data`: tokenize .jsonl / .txt documents into token shards (format: olmo/data/shards.py).

Pipeline (olmo/data/prepare_pipeline.py): the main process reads the inputs as chunks of raw lines and hands them to
worker processes, which parse the JSON, tokenize, append EOS and return flat token arrays, in input order; the
main process hashes them and streams them into the current shard, which a background thread flushes to disk as
it grows (olmo/data/write_behind.py), so closing a shard does not stop everything to write it out. Shards end on
document boundaries, and the output is byte-identical for any number of workers. Small inputs (or --workers 1)
are encoded in-process.

Crash safety: a shard is written as `.part-NNNNN.npy.tmp`, fsynced and renamed; its sidecar `part-NNNNN.json`
(written last, atomically) marks it complete and records how far into the inputs it reaches. `prepare.json`
fingerprints the job (inputs with sizes, tokenizer hash, shard size). Rerunning the same job after a crash
resumes after the last complete shard; a finished job is not redone; a different job in the same directory is
refused unless --overwrite.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmo.config import ConfigError
from olmo.data import prepare_pipeline as pipe
from olmo.data.prepare_pipeline import Encoded, Encoder, WorkerSpec
from olmo.data.shards import (
    BLOCK_BYTES,
    FORMAT,
    MANIFEST,
    VERSION,
    ShardMeta,
    dtype_for_vocab,
    read_sidecars,
    shard_name,
)
from olmo.data.special_tokens import special_ids
from olmo.data.write_behind import WriteBehind
from olmo.errors import OlmoError, Resumable, is_disk_full
from olmo.fsutil import (
    atomic_write_json,
    check_output_dir,
    create_fresh,
    fsync_dir,
    gigabytes,
    missing_dirs,
    mount_of,
    remove_empty_dirs,
)
from olmo.lock import LOCK_NAME, DirLock

JOB_FILE = "prepare.json"
SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".txt", ".txt.gz")
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")


# ------------------------------------------------------------------------------------------------ inputs
def find_inputs(paths: list[Path]) -> list[Path]:
    """Files named on the command line, plus every supported file under named directories, sorted."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
        elif p.is_file():
            if not p.name.endswith(SUFFIXES):
                raise ConfigError(f"{p}: unsupported input type; use .jsonl, .jsonl.gz, .json.gz, .txt or .txt.gz")
            out.append(p)
        else:
            raise ConfigError(f"input {p} does not exist")
    if not out:
        raise ConfigError(f"no .jsonl/.txt inputs found in {', '.join(map(str, paths))}")
    for f in out:
        _check_readable(f)
    return out


def _check_readable(path: Path) -> None:
    """Refuse an input that cannot be opened, or a .gz that is not gzip, before anything is written (damage
    further into a file is found while reading it, olmo/data/prepare_pipeline.py)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError as e:
        raise ConfigError(f"input {path}: cannot read it: {e.strerror}") from None
    if path.name.endswith(".gz") and head and head != b"\x1f\x8b":
        raise ConfigError(f"input {path}: it is not gzip data; recompress it, or drop the .gz from its name if it "
                          "is plain text")


@dataclass
class FileStats:
    docs: int = 0
    empty: int = 0  # documents with no text
    bad: int = 0  # lines that are not JSON objects with a string "text"
    first_bad_line: int | None = None
    tokens: int = 0


# ------------------------------------------------------------------------------------------------ tokenizer
@dataclass
class Tok:
    encode: Callable[[list[str]], list[list[int]]]
    vocab_size: int
    eos_id: int
    sha256: str
    path: Path
    tokenizer: Any = None  # the loaded `tokenizers.Tokenizer`


def load_tokenizer(path: Path, eos_token: str | None = None) -> Tok:
    from olmo.data.corpus import TOKENIZER_PATH

    if str(path) == "bundled":
        path = TOKENIZER_PATH
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"tokenizer {path} not found; pass a Hugging Face tokenizer.json (or 'bundled')")
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises its own Exception type for bad JSON
        raise ConfigError(f"{path} is not a Hugging Face tokenizer.json ({e})") from None
    names = [eos_token] if eos_token else list(EOS_CANDIDATES)
    eos = next((tok.token_to_id(n) for n in names if tok.token_to_id(n) is not None), None)
    if eos is None:
        raise ConfigError(f"{path} has no end-of-document token {' / '.join(names)}; pass --eos-token TOKEN")
    fast = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: faster (tokenizers >= 0.20)

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in fast(texts, add_special_tokens=False)]

    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Tok(encode, tok.get_vocab_size(with_added_tokens=True), eos, sha, path, tok)


# ------------------------------------------------------------------------------------------------ writing
class ShardWriter:
    """Streams token arrays into `.part-NNNNN.npy.tmp`, hashing as it goes; `finish` makes the shard real."""

    def __init__(self, directory: Path, index: int, dtype: str):
        self.directory, self.name, self.dtype = directory, shard_name(index), dtype
        self.tmp = directory / f".{self.name}.tmp"
        self.f = create_fresh(self.tmp)  # open until finish(): the shard is written in pieces
        self.behind = WriteBehind(self.f.fileno())  # so that finish() does not write the whole shard out at once
        self.sha = hashlib.sha256()
        self.crcs: list[str] = []
        self.crc, self.in_block = 0, 0
        self.tokens = self.docs = 0
        self.max_id = -1

    def write(self, ids: np.ndarray, docs: int) -> None:
        data = ids.data.cast("B")  # no copy: `ids` is a contiguous slice
        self.f.write(data)
        self.behind.wrote(len(data))
        self.sha.update(data)
        while len(data):
            take = min(BLOCK_BYTES - self.in_block, len(data))
            self.crc = zlib.crc32(data[:take], self.crc)
            self.in_block += take
            data = data[take:]
            if self.in_block == BLOCK_BYTES:
                self.crcs.append(f"{self.crc:08x}")
                self.crc, self.in_block = 0, 0
        self.tokens += ids.size
        self.docs += docs
        self.max_id = max(self.max_id, int(ids.max()) if ids.size else -1)

    def finish(self, tok: Tok, resume_after: dict[str, int]) -> ShardMeta:
        if self.in_block:
            self.crcs.append(f"{self.crc:08x}")
        self.behind.close()
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        final = self.directory / self.name
        os.replace(self.tmp, final)
        meta = ShardMeta(self.name, self.tokens, self.docs, self.dtype, tok.vocab_size, tok.eos_id, tok.sha256,
                         self.sha.hexdigest(), self.max_id, self.crcs, resume_after)
        try:
            fsync_dir(self.directory)
            atomic_write_json(self.directory / self.name.replace(".npy", ".json"), meta.to_json())
        except BaseException:
            final.unlink(missing_ok=True)  # a shard without its sidecar is not finished: no half state stays
            raise
        return meta

    def abort(self) -> None:
        """Drop the shard being written (its temp file)."""
        with contextlib.suppress(OSError):
            self.behind.close()  # before the file closes: the thread flushes its descriptor
        with contextlib.suppress(OSError):
            self.f.close()
        self.tmp.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------ the job
@dataclass
class PrepareResult:
    shards: list[ShardMeta]
    stats: dict[str, FileStats]
    seconds: float
    resumed_from: int = 0  # shards kept from an interrupted run
    already_done: bool = False
    tokens_this_run: int = 0
    skipped: list[str] = field(default_factory=list)
    workers: int = 0  # worker processes used; 0: encoded in-process
    worker_cpu_s: float = 0.0  # CPU time spent encoding (parse + tokenize + pack), summed over workers


def job_fingerprint(inputs: list[Path], tok: Tok, shard_tokens: int) -> dict[str, Any]:
    return {"inputs": [{"path": str(p.resolve()), "bytes": p.stat().st_size} for p in inputs],
            "tokenizer_sha256": tok.sha256, "eos_id": tok.eos_id, "shard_tokens": shard_tokens}


def _read_job(out: Path) -> dict[str, Any] | None:
    """The job prepare.json describes; None when there is none or it is not one (then it is another job's)."""
    try:
        job = json.loads((out / JOB_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return job if isinstance(job, dict) else None


def _stale_temps(out: Path) -> list[Path]:
    """Files a killed run was writing: `.part-N.npy.tmp` (a shard), `.part-N.json.tmp<pid>` (a sidecar, see
    fsutil.atomic_write), `.manifest.json.tmp<pid>`, `.prepare.json.tmp<pid>`."""
    return [p for pat in (".part-*.tmp*", f".{MANIFEST}.tmp*", f".{JOB_FILE}.tmp*") for p in out.glob(pat)]


def _clear_outputs(out: Path) -> None:
    for p in list(out.glob("part-*.npy")) + list(out.glob("part-*.json")) + _stale_temps(out):
        p.unlink()
    for name in (MANIFEST, JOB_FILE):
        (out / name).unlink(missing_ok=True)


def _prefetch(it: Iterator[Any], depth: int = 2) -> Generator[Any, None, None]:
    """Run `it` in a thread, `depth` items ahead, so that reading and encoding overlap writing."""
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    done = object()
    err: list[BaseException] = []

    def work() -> None:
        try:
            for item in it:
                q.put(item)
        except BaseException as e:  # re-raised in the consumer
            err.append(e)
        q.put(done)

    threading.Thread(target=work, daemon=True).start()
    while (item := q.get()) is not done:
        yield item
    if err:
        raise err[0]


def encoded(inputs: list[Path], start: tuple[int, int], tok: Tok, workers: int | None,
            progress: Callable[[int], None] | None = None) -> tuple[Generator[Encoded, None, None], int]:
    """The inputs from `start` on as Encoded tasks, in order, and the number of worker processes encoding them:
    `workers` (default: all usable CPUs) but at most one per BYTES_PER_WORKER of input; 0 means in-process, for
    --workers 1 and for inputs too small to repay starting processes."""
    total = sum(p.stat().st_size * (4 if p.name.endswith(".gz") else 1) for p in inputs[start[0]:])  # ~text bytes
    workers = min(workers or pipe.usable_cpus(), max(2, total // pipe.BYTES_PER_WORKER))
    size = pipe.chunk_bytes(total, workers)
    dtype = dtype_for_vocab(tok.vocab_size)
    if workers > 1 and total >= pipe.MIN_POOL_BYTES:
        tasks = pipe.read_tasks(inputs, start, size, progress, tail=workers * size)  # the last wave in small tasks
        return pipe.encode_all(tasks, WorkerSpec(str(tok.path), tok.eos_id, dtype), workers), workers
    # One thread reads and encodes (the tokenizer releases the GIL and uses the cores it is allowed) while the
    # caller writes.
    tasks = pipe.read_tasks(inputs, start, size, progress)
    return _prefetch(map(Encoder(tok.tokenizer, tok.eos_id, dtype), tasks)), 0


def _count(stats: dict[str, FileStats], inputs: list[Path], r: Encoded, docs: int, tokens: int) -> None:
    st = stats.setdefault(str(inputs[r.file]), FileStats())
    st.docs += docs
    st.tokens += tokens
    st.empty += r.empty
    st.bad += r.bad
    st.first_bad_line = st.first_bad_line or r.first_bad or None


def prepare(inputs: list[Path], out: Path, tok: Tok, shard_tokens: int, overwrite: bool = False,
            progress: Callable[[int, int], None] | None = None, workers: int | None = None) -> PrepareResult:
    """Tokenize `inputs` into shards in `out` with `workers` processes (default: all usable CPUs).
    `progress(input_bytes_done, tokens_written)` gets increments; the bytes add up to the inputs' total size.

    `out` is locked for the run (olmo/lock.py). On bad input or data found on the way, every file this run
    added is removed again (and `out` itself when this run made it); on a full disk the shard being written
    is removed and the finished ones are kept, so rerunning the same command resumes after them."""
    check_output_dir(out, "--output")
    created = missing_dirs(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create --output {out}: {e.strerror}") from None
    lock = DirLock(out, "--output")
    try:
        lock.acquire()
        before = {p.name for p in out.iterdir()}
        try:
            return _prepare(inputs, out, tok, shard_tokens, overwrite, progress, workers)
        except OlmoError as e:
            if not isinstance(e, Resumable):  # bad input: this run's files go; a machine failure keeps them
                _roll_back(out, before)
            raise
        except OSError as e:  # prepare.json or a temp file: nothing half-written stays (atomic writes)
            if is_disk_full(e):
                raise no_space(out, inputs, tok, sum(m.num_tokens for m in read_sidecars(out)), None) from None
            raise
    finally:
        lock.release()
        remove_empty_dirs(created)  # only when empty: nothing of a failed first run is left


def _roll_back(out: Path, before: set[str]) -> None:
    """Remove what this run added to `out` (never anything that was there before it)."""
    for p in out.iterdir():
        if p.name not in before and p.name != LOCK_NAME and p.is_file():
            p.unlink(missing_ok=True)


class NoSpace(Resumable):
    """The disk filled up; the message names the device and the space still needed."""


def _prepare(inputs: list[Path], out: Path, tok: Tok, shard_tokens: int, overwrite: bool,
             progress: Callable[[int, int], None] | None, workers: int | None) -> PrepareResult:
    t0 = time.perf_counter()
    job = job_fingerprint(inputs, tok, shard_tokens)
    old_job = _read_job(out)
    has_outputs = any(out.glob("part-*")) or (out / MANIFEST).exists()
    if old_job != job and has_outputs:
        if not overwrite:
            raise ConfigError(f"{out} already holds shards from a different prepare-data run (other inputs, "
                              "tokenizer or shard size); use another --output or pass --overwrite")
        _clear_outputs(out)
    for stale in _stale_temps(out):  # being written when the last run died
        stale.unlink()
    done = read_sidecars(out) if old_job == job else []
    if done and (out / MANIFEST).is_file():
        return PrepareResult(done, {}, time.perf_counter() - t0, len(done), already_done=True)
    atomic_write_json(out / JOB_FILE, job)

    start = (done[-1].resume_after["input"], done[-1].resume_after["records"]) if done else (0, 0)
    stats: dict[str, FileStats] = {}
    shards = list(done)
    last_pos = start
    if progress and start[0]:  # account for the inputs already in finished shards
        progress(sum(p.stat().st_size for p in inputs[:start[0]]), 0)
    new_tokens, cpu_s = 0, 0.0
    read = [0]  # input bytes done, for the tokens-per-byte estimate of a full disk

    def on_done(nbytes: int, tokens: int) -> None:  # bytes count once their tokens are written: 100% means done
        read[0] += nbytes
        if progress:
            progress(nbytes, tokens)

    results, n_workers = encoded(inputs, start, tok, workers, lambda n: on_done(n, 0))
    writer: ShardWriter | None = None  # the last, still open shard
    try:
        shards, writer, last_pos, new_tokens, cpu_s = _stream(results, inputs, out, tok, shard_tokens, stats, shards,
                                                             last_pos, on_done)
        if writer is not None:
            shards.append(writer.finish(tok, {"input": last_pos[0], "records": last_pos[1]}))
            writer = None
        if not shards:
            raise ConfigError("the inputs hold no documents (every file is empty or unparseable); "
                              "see `olmo prepare-data --dry-run`")
        write_manifest(out, shards, tok, job, stats)
    except (_Full, OSError) as e:
        if isinstance(e, OSError) and not is_disk_full(e):
            raise
        full = e if isinstance(e, _Full) else _Full(writer, shards, new_tokens)
        if full.writer is not None:
            full.writer.abort()
        per_byte = (full.tokens / read[0]) if read[0] and full.tokens else None
        raise no_space(out, inputs, tok, sum(m.num_tokens for m in full.shards), per_byte) from None
    return PrepareResult(shards, stats, time.perf_counter() - t0, len(done), tokens_this_run=new_tokens,
                         workers=n_workers, worker_cpu_s=cpu_s)


def no_space(out: Path, inputs: list[Path], tok: Tok, tokens_done: int, tokens_per_byte: float | None) -> NoSpace:
    """The one-line "disk full" error, with the space the rest of the job needs: the inputs' text at the
    tokens-per-byte ratio seen so far (about 4 bytes of text per token before there is one), less the tokens
    in finished shards."""
    text = sum(p.stat().st_size * (4 if p.name.endswith(".gz") else 1) for p in inputs if p.is_file())
    itemsize = np.dtype(dtype_for_vocab(tok.vocab_size)).itemsize
    needed = max(int(text * (tokens_per_byte or 0.25)) - tokens_done, 0) * itemsize
    return NoSpace(f"no space left on {mount_of(out)} (needs about {gigabytes(max(needed, 1 << 20))}) while "
                   f"writing shards to {out}; free space there and rerun the same command: finished shards are "
                   "kept and it resumes after them")


class _Full(Exception):
    """A write hit a full disk: what was being written, for the cleanup and the message."""

    def __init__(self, writer: ShardWriter | None, shards: list[ShardMeta], tokens: int):
        self.writer, self.shards, self.tokens = writer, shards, tokens


def _stream(results: Generator[Encoded, None, None], inputs: list[Path], out: Path, tok: Tok, shard_tokens: int,
            stats: dict[str, FileStats], shards: list[ShardMeta], last_pos: tuple[int, int],
            progress: Callable[[int, int], None] | None,
            ) -> tuple[list[ShardMeta], ShardWriter | None, tuple[int, int], int, float]:
    """Write the encoded documents into shards, each ending on a document (the last one may stay open)."""
    dtype = dtype_for_vocab(tok.vocab_size)
    writer: ShardWriter | None = None
    new_tokens, cpu_s = 0, 0.0
    with closing(results):  # on any error (Ctrl-C included) the worker pool is shut down before we return
        try:
            for r in results:
                flat = np.frombuffer(r.ids, dtype=dtype)
                ends = np.frombuffer(r.ends, dtype=np.int64)
                records = np.frombuffer(r.records, dtype=np.int64)
                _count(stats, inputs, r, len(ends), flat.size)
                new_tokens += flat.size
                cpu_s += r.cpu_s
                if progress:
                    progress(r.nbytes, flat.size)
                first = 0  # first document of this task not yet written
                while first < len(ends):
                    if writer is None:
                        writer = ShardWriter(out, len(shards), dtype)
                    base = int(ends[first - 1]) if first else 0
                    # the document that fills the shard: the first whose end reaches the shard's remaining room
                    full = int(np.searchsorted(ends, base + shard_tokens - writer.tokens, side="left"))
                    last = min(full, len(ends) - 1)
                    writer.write(flat[base:int(ends[last])], last - first + 1)
                    last_pos = (r.file, int(records[last]))
                    if full < len(ends):
                        shards.append(writer.finish(tok, {"input": last_pos[0], "records": last_pos[1]}))
                        writer = None
                    first = last + 1
        except BaseException as e:
            if isinstance(e, OSError) and is_disk_full(e):
                raise _Full(writer, shards, new_tokens) from None
            if writer is not None:  # no half shard stays, whatever stopped the run
                writer.abort()
            raise
    return shards, writer, last_pos, new_tokens, cpu_s


def write_manifest(out: Path, shards: list[ShardMeta], tok: Tok, job: dict[str, Any],
                   stats: dict[str, FileStats]) -> None:
    atomic_write_json(out / MANIFEST, {
        "format": FORMAT, "version": VERSION,
        "dtype": dtype_for_vocab(tok.vocab_size), "vocab_size": tok.vocab_size, "eos_id": tok.eos_id,
        # what OLMo-core's TokenizerConfig asks for besides eos_token_id (null: the tokenizer has no such token)
        **(special_ids(tok.tokenizer, tok.path) if tok.tokenizer is not None else {"bos_id": None, "pad_id": None}),
        "tokenizer": {"path": str(tok.path), "sha256": tok.sha256},
        "num_tokens": sum(s.num_tokens for s in shards), "num_docs": sum(s.num_docs for s in shards),
        "inputs": job["inputs"], "shard_tokens": job["shard_tokens"],
        "shards": [s.to_json() for s in shards],
    })


def dry_run(inputs: list[Path], tok: Tok, workers: int | None = None) -> dict[str, FileStats]:
    """Per-file document and token counts (EOS included), without writing anything."""
    stats: dict[str, FileStats] = {}
    itemsize = np.dtype(dtype_for_vocab(tok.vocab_size)).itemsize
    results, _ = encoded(inputs, (0, 0), tok, workers)
    with closing(results):
        for r in results:
            _count(stats, inputs, r, len(r.ends) // 8, len(r.ids) // itemsize)
    return stats
