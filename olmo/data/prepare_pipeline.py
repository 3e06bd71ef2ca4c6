"""The parallel half of `olmo prepare-data`: inputs cut into tasks, tasks encoded into token arrays by workers.

The main process only moves bytes: `read_tasks` (through olmo/data/readers.py) cuts each input into tasks of
whole records (lines that end on a line break, column values of a record batch) and numbers their first record
(the last few tasks smaller, so that the workers run out of work together). All per-document and per-token work
(decoding, JSON parsing, tokenizing, BOS/EOS, packing the ids into one flat array: olmo/data/tasks.py) happens in
`Encoder`, run by worker processes when there are several (`encode_all`), so it scales with cores instead of
queueing on one process's GIL. Results come back in input order whatever the worker count, and a document's
tokens do not depend on which task it was in, so the shards are byte-identical for any number of workers.

Every worker imports this module: keep it light (no numpy, no torch, nothing from olmo that pulls them in).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, NamedTuple

from olmo.data import readers
from olmo.data.readers import ReadOptions, Sizes
from olmo.data.tasks import DEFAULT_READING, TYPECODES, Encoded, Encoder, Reading, Task, parse
from olmo.errors import Resumable

__all__ = ["TYPECODES", "Encoded", "Encoder", "ReadOptions", "Reading", "Task", "encode_all", "parse", "read_tasks"]

MIN_POOL_BYTES = 1 << 20  # smaller inputs are encoded in-process: worker start-up would cost more than it saves
CHUNK_MIN, CHUNK_MAX = 64 << 10, 1 << 20  # bytes of input per task: enough tasks to feed every worker
# At most one worker per this much input: starting a worker costs a few ms of the main process's time (the
# forkserver forks them one by one), which on a small input is more than the worker would save.
BYTES_PER_WORKER = 256 << 10


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's total)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def chunk_bytes(total_bytes: int, workers: int) -> int:
    """Task size: about eight tasks per worker on small inputs (so all of them start at once), 1 MiB on large."""
    return max(CHUNK_MIN, min(CHUNK_MAX, total_bytes // max(1, 8 * workers)))


def read_tasks(inputs: list[Path], start: tuple[int, int], size: int,
               progress: Callable[[int], None] | None = None, tail: int = 0,
               options: ReadOptions = readers.DEFAULTS) -> Iterator[Task]:
    """Tasks of about `size` bytes covering `inputs` from record `start[1]` of input `start[0]` on, in order
    (olmo/data/readers.py reads each format). Each task carries the (compressed) input bytes it covers;
    `progress(n)` gets only the bytes no task carries (records before the resume point, a gzip trailer), so a
    progress bar counting both reaches 100% exactly when the last task is written, not when the reader (which runs
    ahead of the encoders) reaches the end. The last `tail` bytes of input come in tasks a quarter the size: the
    workers then run out of work within a quarter task of each other, instead of all but one waiting for the last
    full-size task."""
    for i in range(start[0], len(inputs)):
        after = sum(map(_size, inputs[i + 1:])) if tail else 0  # input bytes after this file
        sizes = Sizes(size, max(CHUNK_MIN, size // 4), tail - after)
        yield from _input_tasks(i, inputs[i], start[1] if i == start[0] else 0, sizes, progress, options)


def _input_tasks(i: int, path: Path, skip: int, sizes: Sizes, progress: Callable[[int], None] | None,
                 options: ReadOptions) -> Iterator[Task]:
    """The tasks of input `i`, from the reader of its format."""
    kind = readers.kind_of(path)
    if kind in ("parquet", "arrow"):
        from olmo.data import readers_arrow

        return readers_arrow.tasks(i, path, kind, skip, sizes.size, progress, options)
    return readers.file_tasks(i, path, skip, sizes, progress, options)


def _size(path: Path) -> int:
    """Bytes of a later input, 0 when it cannot be read now (reading it reports that, naming the right file)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ------------------------------------------------------------------------------------------------ workers
class WorkerSpec(NamedTuple):
    tokenizer_path: str
    eos_id: int
    dtype: str
    reading: Reading = DEFAULT_READING
    bos_id: int | None = None


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
    _encoder = Encoder(Tokenizer.from_file(spec.tokenizer_path), spec.eos_id, spec.dtype, spec.reading,
                       spec.bos_id)


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


@contextlib.contextmanager
def _no_working_folder_imports() -> Iterator[None]:
    """While workers start: a worker (and the forkserver) begins as `python -c ...`, which puts the working folder
    first on sys.path before its first import, so a multiprocessing/ or json.py there would run in every worker.
    PYTHONSAFEPATH=1 (Python >= 3.11, inherited by the child) keeps the folder off; the child then takes this
    process's sys.path, so that is cleaned too: no empty, relative or working-folder entry."""
    saved_env, saved_path = os.environ.get("PYTHONSAFEPATH"), list(sys.path)
    here = os.path.realpath(os.getcwd())
    os.environ["PYTHONSAFEPATH"] = "1"
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and os.path.realpath(p) != here]
    try:
        yield
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = saved_env


def encode_all(tasks: Iterator[Task], spec: WorkerSpec, workers: int) -> Generator[Encoded, None, None]:
    """Encode `tasks` in `workers` processes; results in task order. At most 2 * workers + 2 tasks are in flight,
    so memory stays bounded however large the inputs."""
    with _no_working_folder_imports():
        yield from _encode_in_pool(tasks, spec, workers)


def _encode_in_pool(tasks: Iterator[Task], spec: WorkerSpec, workers: int) -> Generator[Encoded, None, None]:
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
