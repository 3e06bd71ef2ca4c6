"""The parallel half of `olmo prepare-data`: inputs cut into chunks of lines, chunks encoded into token arrays.

The main process only moves bytes: `read_tasks` cuts each input into chunks that end on a line break and numbers
their first line (the last few chunks smaller, so that the workers run out of work together). All per-document and
per-token work (JSON parsing, tokenizing, appending EOS, packing the ids into one flat array) happens in `Encoder`,
run by worker processes when there are several (`encode_all`), so it scales with cores instead of queueing on one
process's GIL. Results come back in input order whatever the worker count, and a document's tokens do not depend on
which chunk it was in, so the shards are byte-identical for any number of workers.

Every worker imports this module: keep it light (no numpy, no torch, nothing from olmo that pulls them in).
"""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import threading
import time
import zlib
from array import array
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import IO, Any, NamedTuple

from olmo.errors import OlmoError, Resumable

MIN_POOL_BYTES = 1 << 20  # smaller inputs are encoded in-process: worker start-up would cost more than it saves
CHUNK_MIN, CHUNK_MAX = 64 << 10, 1 << 20  # bytes of input per task: enough tasks to feed every worker
# At most one worker per this much input: starting a worker costs a few ms of the main process's time (the
# forkserver forks them one by one), which on a small input is more than the worker would save.
BYTES_PER_WORKER = 256 << 10
TYPECODES = {"uint16": "H", "uint32": "I"}


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's total)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Task(NamedTuple):
    """A run of whole lines of one input (or a whole .txt file), the unit of work handed to an encoder."""

    file: int  # index into the input list
    txt: bool  # a .txt file: the whole of `data` is one document, record number 1
    data: bytes
    first_line: int  # record number of the first line in `data`
    skip: int  # records up to this number were written by an earlier run (resume): pass over them
    nbytes: int = 0  # input-file bytes this task covers (compressed, for .gz): progress counts them once written


class Encoded(NamedTuple):
    """A task's documents, each followed by EOS, as raw arrays (native byte order) plus per-file counts."""

    file: int
    ids: bytes  # the token ids of all documents, flat, in the shard dtype
    ends: bytes  # int64: each document's end offset in `ids`
    records: bytes  # int64: each document's record number (JSON line, or 1 for a .txt file)
    empty: int  # documents whose text is blank
    bad: int  # lines that are not JSON objects with a string "text"
    first_bad: int  # record number of the first bad line, 0 when none
    cpu_s: float  # CPU seconds the encoding took (what the workers spend; see bench/prepare_data.py)
    nbytes: int = 0  # the task's input-file bytes (Task.nbytes), passed through


def chunk_bytes(total_bytes: int, workers: int) -> int:
    """Task size: about eight tasks per worker on small inputs (so all of them start at once), 1 MiB on large."""
    return max(CHUNK_MIN, min(CHUNK_MAX, total_bytes // max(1, 8 * workers)))


def read_tasks(inputs: list[Path], start: tuple[int, int], size: int,
               progress: Callable[[int], None] | None = None, tail: int = 0) -> Iterator[Task]:
    """Tasks of about `size` bytes covering `inputs` from record `start[1]` of input `start[0]` on, in order.
    Each task carries the (compressed) input bytes it covers; `progress(n)` gets only the bytes no task carries
    (lines before the resume point, a gzip trailer), so a progress bar counting both reaches 100% exactly when
    the last task is written, not when the reader (which runs ahead of the encoders) reaches the end.
    The last `tail` bytes of input come in tasks a quarter the size: the workers then run out of work within a
    quarter task of each other, instead of all but one waiting for the last full-size task."""
    for i in range(start[0], len(inputs)):
        try:
            after = sum(map(_size, inputs[i + 1:])) if tail else 0  # input bytes after this file
            yield from _file_tasks(i, inputs[i], start[1] if i == start[0] else 0, size, progress, tail - after)
        except (OSError, EOFError, zlib.error) as e:
            raise OlmoError(f"input {inputs[i]}: {_read_problem(e)}") from None


def _size(path: Path) -> int:
    """Bytes of a later input, 0 when it cannot be read now (reading it reports that, naming the right file)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_problem(e: BaseException) -> str:
    """What went wrong reading an input, in words: these are damaged or unreadable files, not bugs."""
    if isinstance(e, gzip.BadGzipFile):
        return "it is not gzip data; recompress it, or drop the .gz from its name if it is plain text"
    if isinstance(e, EOFError):
        return "its gzip data is cut short (an interrupted download or copy?); fetch or compress it again"
    if isinstance(e, zlib.error):
        return f"its gzip data is corrupt ({e}); fetch or compress it again"
    return f"cannot read it: {getattr(e, 'strerror', None) or e}"


def _file_tasks(i: int, path: Path, skip: int, size: int, progress: Callable[[int], None] | None,
                tail: int) -> Iterator[Task]:
    """The tasks of input `i` (records up to `skip` are passed over); its bytes from `tail` before its end on
    (as stored, compressed for .gz) in quarter-size tasks."""
    with open(path, "rb") as raw:
        f: IO[bytes] = gzip.GzipFile(fileobj=raw) if path.name.endswith(".gz") else raw  # type: ignore[assignment]
        if ".txt" in path.name:
            data = f.read()
            if skip == 0:
                yield Task(i, True, data, 1, 0, raw.tell())
            elif progress:
                progress(raw.tell())
            return
        line, last = 1, 0
        small_from = os.fstat(raw.fileno()).st_size - tail
        while data := f.read(size if raw.tell() < small_from else max(CHUNK_MIN, size // 4)):
            if not data.endswith(b"\n"):
                data += f.readline()  # finish the last line, so no line is split between two tasks
            newlines = data.count(b"\n")
            n_lines = newlines + (not data.endswith(b"\n"))
            nbytes, last = raw.tell() - last, raw.tell()
            if line + n_lines - 1 > skip:  # not entirely before the resume point
                yield Task(i, False, data, line, skip, nbytes)
            elif progress:
                progress(nbytes)
            line += newlines
        if progress and raw.tell() > last:
            progress(raw.tell() - last)


def parse(task: Task) -> tuple[list[str], list[int], int, int, int]:
    """(texts, record numbers, empty, bad, first bad record) of the non-empty documents of a task."""
    if task.txt:
        text = task.data.decode("utf-8", errors="replace")
        return ([text], [1], 0, 0, 0) if text.strip() else ([], [], 1, 0, 0)
    texts: list[str] = []
    records: list[int] = []
    empty = bad = first_bad = 0
    for n, line in enumerate(task.data.split(b"\n"), task.first_line):
        if n <= task.skip or not line.strip():
            continue
        try:
            text = json.loads(line)["text"]
            if not isinstance(text, str):
                raise TypeError
        except (ValueError, RecursionError, TypeError, KeyError, IndexError):  # nested too deep is bad too
            bad += 1
            first_bad = first_bad or n
            continue
        if not text.strip():
            empty += 1
            continue
        texts.append(text)
        records.append(n)
    return texts, records, empty, bad, first_bad


class Encoder:
    """Task -> Encoded with one loaded tokenizer (in a worker process, or in the main one)."""

    def __init__(self, tokenizer: Any, eos_id: int, dtype: str):
        self.encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # no offsets: faster
        self.eos_id, self.typecode = eos_id, TYPECODES[dtype]

    def __call__(self, task: Task) -> Encoded:
        t0 = time.process_time()
        texts, records, empty, bad, first_bad = parse(task)
        ids, ends = array(self.typecode), array("q")
        n = 0
        # array.extend converts a list of ints in C; cheaper than numpy's fromiter over a chain of lists
        for enc in self.encode(texts, add_special_tokens=False):
            doc = enc.ids
            ids.extend(doc)
            ids.append(self.eos_id)
            n += len(doc) + 1
            ends.append(n)
        return Encoded(task.file, ids.tobytes(), ends.tobytes(), array("q", records).tobytes(), empty, bad,
                       first_bad, time.process_time() - t0, task.nbytes)


# ------------------------------------------------------------------------------------------------ workers
class WorkerSpec(NamedTuple):
    tokenizer_path: str
    eos_id: int
    dtype: str


_encoder: Encoder | None = None  # the worker process's own


def _init_worker(spec: WorkerSpec) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the main process, which then stops the pool
    # If the main process is killed outright it cannot stop the pool, and an idle worker would wait for tasks
    # forever: exit as soon as the parent is gone.
    parent = mp.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()
    # One tokenizer thread per worker: the processes are the parallelism, and --workers is the core budget. That
    # thread is the tokenizer's own (parallelism on, a pool of one), not this process's main thread: the same
    # texts encode ~30% slower per token on a process's main thread than on any other thread (measured with
    # tokenizers 0.23 and a 100K-entry BPE, and not changed by malloc's trim settings), and the bench's anchor,
    # raw tokenizers with N threads, encodes on pool threads too.
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ["RAYON_NUM_THREADS"] = "1"
    from tokenizers import Tokenizer

    global _encoder
    _encoder = Encoder(Tokenizer.from_file(spec.tokenizer_path), spec.eos_id, spec.dtype)


def _exit_with(sentinel: int) -> None:
    mp_connection.wait([sentinel])
    os._exit(1)


def _encode_in_worker(task: Task) -> Encoded:
    assert _encoder is not None, "worker not initialised"
    return _encoder(task)


def _context() -> Any:
    """forkserver where there is one: each worker is forked from a small server process that has already imported
    this module and tokenizers (and the main script, so workers do not re-run its imports), which is far cheaper
    than a fresh interpreter per worker and, unlike a plain fork, safe in a process that runs threads."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", __name__, "tokenizers"])  # read only when the server first starts
    return ctx


def encode_all(tasks: Iterator[Task], spec: WorkerSpec, workers: int) -> Generator[Encoded, None, None]:
    """Encode `tasks` in `workers` processes; results in task order. At most 2 * workers + 2 tasks are in flight,
    so memory stays bounded however large the inputs."""
    pool = ProcessPoolExecutor(workers, mp_context=_context(), initializer=_init_worker, initargs=(spec,))
    window: deque[Future[Encoded]] = deque()
    finished = False
    try:
        for task in tasks:
            window.append(pool.submit(_encode_in_worker, task))  # starts a worker per call until all are up
            while window and (window[0].done() or len(window) > 2 * workers + 2):
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
        finished = True
    except BrokenProcessPool:
        raise Resumable("a prepare-data worker process died (out of memory?); rerun the same command to resume "
                        "after the last complete shard, with fewer --workers if memory is short") from None
    finally:
        # Every task done: the workers exit in the background (tens of ms for many) while the caller finishes
        # the last shard. Stopped early (an error, Ctrl-C): cancel what is queued and wait until they are gone.
        pool.shutdown(wait=not finished, cancel_futures=True)
