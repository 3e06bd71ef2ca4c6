"""`olmo prepare-data`: tokenize documents (JSON lines, .txt, Parquet, saved datasets) into token shards (format:
olmo/data/shards.py), with the same ids per document as OLMo's `dolma tokens` (olmo/data/tasks.py).

Pipeline (olmo/data/prepare_pipeline.py): the main process reads the inputs (olmo/data/inputs.py, readers.py) as
tasks of whole records and hands them to worker processes, which decode, parse, tokenize, add EOS (and BOS when
asked) and return flat token arrays, in input order; the
main process hashes them and streams them into the current shard, which a background thread flushes to disk as
it grows (olmo/data/write_behind.py), so closing a shard does not stop everything to write it out. Shards end on
document boundaries, and the output is byte-identical for any number of workers. Small inputs (or --workers 1)
are encoded in-process.

Crash safety: a shard is written under a temp name beside it, fsynced and renamed; its sidecar `part-NNNNN.json`
(written last, atomically) marks it complete and records how far into the inputs it reaches. `prepare.json`
fingerprints the job (inputs with sizes, tokenizer hash, shard size). Rerunning the same job after a crash
resumes after the last complete shard; a finished job is not redone; a different job in the same directory is
refused unless --overwrite.
"""

from __future__ import annotations

import contextlib
import hashlib
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

from olmo import outputs
from olmo.data import prepare_pipeline as pipe
from olmo.data.compressed import is_compressed
from olmo.data.file_stats import DEFAULT_MAX_UNDECODABLE, DecodingJudge, FileStats, count
from olmo.data.inputs import find_inputs
from olmo.data.prepare_folder import JOB_FILE, has_outputs, read_job, roll_back, stale_temps
from olmo.data.prepare_pipeline import Encoded, Encoder, WorkerSpec
from olmo.data.readers import ReadOptions
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
from olmo.data.tasks import Reading
from olmo.data.write_behind import WriteBehind
from olmo.errors import ConfigError, OlmoError, Resumable, is_disk_full
from olmo.fsutil import (
    atomic_write_json,
    check_local,
    check_output_dir,
    gigabytes,
    mount_of,
)
from olmo.lock import hold_for_replacing, let_go, locked_new_dir
from olmo_common.atomic import AtomicFile, shared_mode
from olmo_common.bounded.data import shown
from olmo_common.bounded.files import read_bytes

__all__ = [
    "FileStats",
    "InputOptions",
    "LoadedTokenizer",
    "PrepareResult",
    "dry_run",
    "find_inputs",
    "load_tokenizer",
    "prepare",
]

EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")


@dataclass(frozen=True)
class InputOptions:
    """How inputs are read and turned into documents (all of it part of the job: a change is another job)."""

    read: ReadOptions = field(default_factory=ReadOptions)
    reading: Reading = field(default_factory=Reading)
    max_undecodable: float = DEFAULT_MAX_UNDECODABLE

    def fingerprint(self) -> dict[str, Any]:
        return {"text_field": ".".join(self.read.field), "encoding": self.read.encoding or "auto",
                "max_doc_bytes": self.read.max_doc, "strip": self.reading.strip}


# ------------------------------------------------------------------------------------------------ tokenizer
@dataclass
class LoadedTokenizer:
    encode: Callable[[list[str]], list[list[int]]]
    vocab_size: int
    eos_id: int
    sha256: str
    path: Path
    tokenizer: Any = None  # the loaded `tokenizers.Tokenizer`
    bos_id: int | None = None  # put before each document (--bos-token); None: no BOS, as OLMo's tokenizers


def load_tokenizer(path: Path, eos_token: str | None = None, bos_token: str | None = None) -> LoadedTokenizer:
    from olmo.data.corpus import TOKENIZER_PATH

    if str(path) == "bundled":
        path = TOKENIZER_PATH
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"tokenizer {path} not found; pass a Hugging Face tokenizer.json (or 'bundled')")
    from tokenizers import Tokenizer

    try:  # read once, bounded: the bytes parsed are the bytes hashed, and a 3 GB file is refused by its size
        data = read_bytes(path, "tokenizer")
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"tokenizer {path} cannot be read ({e.strerror})") from None
    except Exception as e:  # tokenizers raises its own Exception type for bad JSON; not UTF-8
        raise ConfigError(f"{path} is not a Hugging Face tokenizer.json ({shown(str(e), 200)[1:-1]})") from None
    eos, bos = _special_ids(tok, path, eos_token, bos_token)
    fast = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: faster (tokenizers >= 0.20)

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in fast(texts, add_special_tokens=False)]

    sha = hashlib.sha256(data).hexdigest()
    return LoadedTokenizer(encode, tok.get_vocab_size(with_added_tokens=True), eos, sha, path, tok, bos)


def _special_ids(tok: Any, path: Path, eos_token: str | None, bos_token: str | None) -> tuple[int, int | None]:
    """The EOS id (the token given, else the first known name the tokenizer has) and the BOS id (only when asked)."""
    names = [eos_token] if eos_token else list(EOS_CANDIDATES)
    eos = next((tok.token_to_id(n) for n in names if tok.token_to_id(n) is not None), None)
    if eos is None:
        raise ConfigError(f"{path} has no end-of-document token {' / '.join(names)}; pass --eos-token TOKEN")
    bos = tok.token_to_id(bos_token) if bos_token else None
    if bos_token and bos is None:
        raise ConfigError(f"{path} has no token {bos_token!r} for --bos-token; pass one of its special tokens")
    return eos, bos


# ------------------------------------------------------------------------------------------------ writing
class ShardWriter:
    """Streams token arrays into a temp file beside `part-NNNNN.npy`, hashing as it goes; `finish` makes the shard
    real (olmo_common/atomic.py's AtomicFile: fsync, rename, folder fsync)."""

    def __init__(self, directory: Path, index: int, dtype: str):
        self.directory, self.name, self.dtype = directory, shard_name(index), dtype
        self.f = AtomicFile(directory / self.name, shared_mode())  # open until finish(): written in pieces
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

    def finish(self, tok: LoadedTokenizer, resume_after: dict[str, int]) -> ShardMeta:
        if self.in_block:
            self.crcs.append(f"{self.crc:08x}")
        self.behind.close()
        self.f.commit()
        final = self.directory / self.name
        meta = ShardMeta(self.name, self.tokens, self.docs, self.dtype, tok.vocab_size, tok.eos_id, tok.sha256,
                         self.sha.hexdigest(), self.max_id, self.crcs, resume_after)
        try:
            atomic_write_json(self.directory / self.name.replace(".npy", ".json"), meta.to_json())
        except BaseException:
            final.unlink(missing_ok=True)  # a shard without its sidecar is not finished: no half state stays
            raise
        return meta

    def abort(self) -> None:
        """Drop the shard being written (its temp file)."""
        with contextlib.suppress(OSError):
            self.behind.close()  # before the file closes: the thread flushes its descriptor
        self.f.abort()


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


def job_fingerprint(inputs: list[Path], tok: LoadedTokenizer, shard_tokens: int,
                    options: InputOptions | None = None) -> dict[str, Any]:
    options = options or InputOptions()
    return {"inputs": [{"path": str(p.resolve()), "bytes": p.stat().st_size} for p in inputs],
            "tokenizer_sha256": tok.sha256, "eos_id": tok.eos_id, "bos_id": tok.bos_id, "shard_tokens": shard_tokens,
            "documents": options.fingerprint()}


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


def text_bytes(path: Path) -> int:
    """About how many bytes of text an input holds (compressed text is about a quarter of its size)."""
    return path.stat().st_size * (4 if is_compressed(path) or path.name.endswith(".parquet") else 1)


def encoded(inputs: list[Path], start: tuple[int, int], tok: LoadedTokenizer, workers: int | None,
            progress: Callable[[int], None] | None = None,
            options: InputOptions | None = None) -> tuple[Generator[Encoded, None, None], int]:
    """The inputs from `start` on as Encoded tasks, in order, and the number of worker processes encoding them:
    `workers` (default: all usable CPUs) but at most one per BYTES_PER_WORKER of input; 0 means in-process, for
    --workers 1 and for inputs too small to repay starting processes."""
    options = options or InputOptions()
    total = sum(map(text_bytes, inputs[start[0]:]))
    workers = min(workers or pipe.usable_cpus(), max(2, total // pipe.BYTES_PER_WORKER))
    size = pipe.chunk_bytes(total, workers)
    dtype = dtype_for_vocab(tok.vocab_size)
    if workers > 1 and total >= pipe.MIN_POOL_BYTES:
        # the last wave in small tasks
        tasks = pipe.read_tasks(inputs, start, size, progress, tail=workers * size, options=options.read)
        spec = WorkerSpec(str(tok.path), tok.eos_id, dtype, options.reading, tok.bos_id)
        return pipe.encode_all(tasks, spec, workers), workers
    # One thread reads and encodes (the tokenizer releases the GIL and uses the cores it is allowed) while the
    # caller writes.
    tasks = pipe.read_tasks(inputs, start, size, progress, options=options.read)
    return _prefetch(map(Encoder(tok.tokenizer, tok.eos_id, dtype, options.reading, tok.bos_id), tasks)), 0


def prepare(inputs: list[Path], out: Path, tok: LoadedTokenizer, shard_tokens: int, overwrite: bool = False,
            progress: Callable[[int, int], None] | None = None, workers: int | None = None,
            options: InputOptions | None = None) -> PrepareResult:
    """Tokenize `inputs` into shards in `out` with `workers` processes (default: all usable CPUs), reading them
    as `options` say.
    `progress(input_bytes_done, tokens_written)` gets increments; the bytes add up to the inputs' total size.

    `out` must be new, empty or prepare-data's own output (olmo/outputs.py): the same job there resumes; another
    needs `overwrite`, and is written beside `out` (`.NAME.prepare-new`, resumable) and swapped in when complete,
    never under an `olmo train` reading `out`. Bad input removes every file this run added (and the folder when
    this run made it); a full disk keeps the finished shards, so rerunning the same command resumes after them."""
    options = options or InputOptions()
    check_local(out, "--output")
    check_output_dir(out, "--output")
    target = outputs.claim(out, "prepare-data")
    job = job_fingerprint(inputs, tok, shard_tokens, options)
    if target.state != "own" or read_job(out) == job or not has_outputs(out):
        return _write_in(out, job, inputs, tok, shard_tokens, progress, workers, options)
    if not overwrite:
        raise ConfigError(f"{out} already holds shards from a different prepare-data run (other inputs, "
                          "tokenizer or shard size); use another --output or pass --overwrite")
    let_go(hold_for_replacing(out, "--output"))  # said now, not after the whole job
    side = out.parent / f".{out.name}.prepare-new"
    if outputs.claim(side, "prepare-data").state == "own" and read_job(side) != job:
        outputs.remove_own(side, outputs.KINDS["prepare-data"])  # our own unfinished output of another job
    result = _write_in(side, job, inputs, tok, shard_tokens, progress, workers, options)
    try:
        outputs.publish(target, side)
    except OlmoError as e:  # e.g. an `olmo train` started reading `out` meanwhile: the new shards wait, finished
        raise Resumable(f"{e}; the new shards are complete in {side}: rerun the same command to swap them in") from None
    return result


def _finished(out: Path, job: dict[str, Any]) -> PrepareResult | None:
    """The result of the same job, already complete in `out`; None when there is work to do."""
    done = read_sidecars(out) if read_job(out) == job else []
    if done and (out / MANIFEST).is_file():
        return PrepareResult(done, {}, 0.0, len(done), already_done=True)
    return None


def _write_in(out: Path, job: dict[str, Any], inputs: list[Path], tok: LoadedTokenizer, shard_tokens: int,
              progress: Callable[[int, int], None] | None, workers: int | None,
              options: InputOptions) -> PrepareResult:
    """Run the job in `out` (new, empty or ours), holding it: the --output lock against a second prepare-data,
    and the folder itself exclusively, so that no `olmo train` reads it half-written."""
    if out.is_dir() and (found := _finished(out, job)) is not None:
        return found
    with locked_new_dir(out, "--output"):  # removed on the way out when empty: nothing of a failed first run is left
        held = hold_for_replacing(out, "--output")
        try:
            before = {p.name for p in out.iterdir()}
            if outputs.marker_of(out) is None:
                outputs.write_marker(out, "prepare-data")
            try:
                return _prepare(inputs, out, tok, shard_tokens, job, progress, workers, options)
            except (OlmoError, OSError) as e:
                if (instead := _after_failure(e, out, before, inputs, tok)) is not None:
                    raise instead from None
                raise
        finally:
            let_go(held)


def _after_failure(e: OlmoError | OSError, out: Path, before: set[str], inputs: list[Path],
                   tok: LoadedTokenizer) -> NoSpace | None:
    """Clean up after a failed job: this run's files leave `out` when the failure was the input's or a half-written
    file's (atomic writes), a machine failure (Resumable) keeps the finished shards to resume from. Returns the
    error to raise instead (a full disk, with the space still needed), or None to raise `e`."""
    if isinstance(e, Resumable):
        return None
    if isinstance(e, OSError) and is_disk_full(e):
        return no_space(out, inputs, tok, sum(m.num_tokens for m in read_sidecars(out)), None)
    roll_back(out, before)
    return None


class NoSpace(Resumable):
    """The disk filled up; the message names the device and the space still needed."""


def _prepare(inputs: list[Path], out: Path, tok: LoadedTokenizer, shard_tokens: int, job: dict[str, Any],
             progress: Callable[[int, int], None] | None, workers: int | None,
             options: InputOptions) -> PrepareResult:
    """The job in `out`, which holds nothing or this job's finished shards (resumed after)."""
    t0 = time.perf_counter()
    for stale in stale_temps(out):  # being written when the last run died, in our own folder
        stale.unlink()
    done = read_sidecars(out) if read_job(out) == job else []
    if done and (out / MANIFEST).is_file():
        return PrepareResult(done, {}, time.perf_counter() - t0, len(done), already_done=True)
    atomic_write_json(out / JOB_FILE, job)

    start = (done[-1].resume_after["input"], done[-1].resume_after["records"]) if done else (0, 0)
    stats: dict[str, FileStats] = {}
    shards, last_pos, new_tokens, cpu_s = list(done), start, 0, 0.0
    if progress and start[0]:  # account for the inputs already in finished shards
        progress(sum(p.stat().st_size for p in inputs[:start[0]]), 0)
    read = [0]  # input bytes done, for the tokens-per-byte estimate of a full disk

    def on_done(nbytes: int, tokens: int) -> None:  # bytes count once their tokens are written: 100% means done
        read[0] += nbytes
        if progress:
            progress(nbytes, tokens)

    results, n_workers = encoded(inputs, start, tok, workers, lambda n: on_done(n, 0), options)
    writer: ShardWriter | None = None  # the last, still open shard
    try:
        shards, writer, last_pos, new_tokens, cpu_s = _stream(results, inputs, out, tok, shard_tokens, stats, shards,
                                                             last_pos, on_done, options)
        if writer is not None:
            shards.append(writer.finish(tok, {"input": last_pos[0], "records": last_pos[1]}))
            writer = None
        if not shards:
            raise ConfigError("the inputs hold no documents (every file is empty, unparseable or larger than "
                              "--max-doc-size); see `olmo prepare-data --dry-run`")
        write_manifest(out, shards, tok, job, stats)
    except (_Full, OSError) as e:
        if isinstance(e, OSError) and not is_disk_full(e):
            raise
        raise _full_disk(e if isinstance(e, _Full) else _Full(writer, shards, new_tokens), out, inputs, tok,
                         read[0]) from None
    return PrepareResult(shards, stats, time.perf_counter() - t0, len(done), tokens_this_run=new_tokens,
                         workers=n_workers, worker_cpu_s=cpu_s)


def no_space(out: Path, inputs: list[Path], tok: LoadedTokenizer, tokens_done: int,
             tokens_per_byte: float | None) -> NoSpace:
    """The one-line "disk full" error, with the space the rest of the job needs: the inputs' text at the
    tokens-per-byte ratio seen so far (about 4 bytes of text per token before there is one), less the tokens
    in finished shards."""
    text = sum(text_bytes(p) for p in inputs if p.is_file())
    itemsize = np.dtype(dtype_for_vocab(tok.vocab_size)).itemsize
    needed = max(int(text * (tokens_per_byte or 0.25)) - tokens_done, 0) * itemsize
    return NoSpace(f"no space left on {mount_of(out)} (needs about {gigabytes(max(needed, 1 << 20))}) while "
                   f"writing shards to {out}; free space there and rerun the same command: finished shards are "
                   "kept and it resumes after them")


def _full_disk(full: _Full, out: Path, inputs: list[Path], tok: LoadedTokenizer, bytes_read: int) -> NoSpace:
    """The half-written shard removed; the disk-full error at the tokens per byte seen so far."""
    if full.writer is not None:
        full.writer.abort()
    per_byte = (full.tokens / bytes_read) if bytes_read and full.tokens else None
    return no_space(out, inputs, tok, sum(m.num_tokens for m in full.shards), per_byte)


class _Full(Exception):
    """A write hit a full disk: what was being written, for the cleanup and the message."""

    def __init__(self, writer: ShardWriter | None, shards: list[ShardMeta], tokens: int):
        self.writer, self.shards, self.tokens = writer, shards, tokens


def _stream(results: Generator[Encoded, None, None], inputs: list[Path], out: Path, tok: LoadedTokenizer,
            shard_tokens: int,
            stats: dict[str, FileStats], shards: list[ShardMeta], last_pos: tuple[int, int],
            progress: Callable[[int, int], None] | None, options: InputOptions,
            ) -> tuple[list[ShardMeta], ShardWriter | None, tuple[int, int], int, float]:
    """Write the encoded documents into shards, each ending on a document (the last one may stay open)."""
    dtype = dtype_for_vocab(tok.vocab_size)
    writer: ShardWriter | None = None
    new_tokens, cpu_s = 0, 0.0
    with closing(results):  # on any error (Ctrl-C included) the worker pool is shut down before we return
        try:
            judge = DecodingJudge(stats, inputs, options.max_undecodable, options.read.encoding)
            for r in results:
                judge.reading(r.file)
                flat = np.frombuffer(r.ids, dtype=dtype)
                ends = np.frombuffer(r.ends, dtype=np.int64)
                records = np.frombuffer(r.records, dtype=np.int64)
                count(stats, inputs, r, len(ends), flat.size)
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
            judge.reading(None)
        except BaseException as e:
            if isinstance(e, OSError) and is_disk_full(e):
                raise _Full(writer, shards, new_tokens) from None
            if writer is not None:  # no half shard stays, whatever stopped the run
                writer.abort()
            raise
    return shards, writer, last_pos, new_tokens, cpu_s


def write_manifest(out: Path, shards: list[ShardMeta], tok: LoadedTokenizer, job: dict[str, Any],
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


def dry_run(inputs: list[Path], tok: LoadedTokenizer, workers: int | None = None, options: InputOptions | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, FileStats]:
    """Per-file document and token counts (EOS included), without writing anything; `progress` as prepare's."""
    options = options or InputOptions()
    stats: dict[str, FileStats] = {}
    itemsize = np.dtype(dtype_for_vocab(tok.vocab_size)).itemsize
    results, _ = encoded(inputs, (0, 0), tok, workers, (lambda n: progress(n, 0)) if progress else None, options)
    with closing(results):
        for r in results:
            count(stats, inputs, r, len(r.ends) // 8, len(r.ids) // itemsize)
            if progress:
                progress(r.nbytes, len(r.ids) // itemsize)
    return stats
