"""Progress of the trainer's long phases (eval, checkpoint save, shard checks, an import's writes), library side.

A function with a long phase takes a `Phases` factory: `with phases("eval", total) as advance: ... advance(n)`,
where `advance` gets work *finished* (batches evaluated, bytes on disk), so the count reaches `total` exactly when
the phase is done. The command line passes one that draws a bar on stderr when it is a terminal
(olmo/cli/progress.py: `phase_bars`); the default, `silent`, counts nothing. A phase that is predicted to take
more than `NOTE_SECONDS` also gets a start line in the log (the caller's `say`), so a log file shows what the
run is doing during a long eval or save, not just a silence.

`watch_folder` turns a writer that reports nothing (torch.distributed.checkpoint) into progress: a thread adds
up the bytes of the files appearing in the folder it writes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

Advance = Callable[[int], None]
Phases = Callable[[str, int], AbstractContextManager[Advance]]
NOTE_SECONDS = 3.0  # a phase predicted to take longer than this gets a start line in the log
NOTE_BYTES = 1 << 30  # a save of more than this gets one (about a second at 1 GB/s; far more on shared storage)


@contextlib.contextmanager
def silent(label: str, total: int) -> Iterator[Advance]:
    """The default `Phases`: nothing is shown."""
    yield lambda n: None


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files in `folder` and one level below (DCP's layout), never following a link."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
            elif entry.is_dir(follow_symlinks=False):
                total += sum(e.stat(follow_symlinks=False).st_size for e in os.scandir(entry.path)
                             if e.is_file(follow_symlinks=False))
    return total


@contextlib.contextmanager
def watch_folder(folders: tuple[Path, ...], advance: Advance, every: float = 0.25) -> Iterator[None]:
    """While the block runs, `advance` hears each increase of the bytes written into the first of `folders`
    (which may not exist yet); a last look when the block ends, at whichever of them exists then (a checkpoint
    is renamed from its temp name when done), counts what was written after the last poll."""
    seen = [0]
    stop = threading.Event()

    def look() -> None:
        now = max(folder_bytes(f) for f in folders)
        if now > seen[0]:
            advance(now - seen[0])
            seen[0] = now

    def poll() -> None:
        while not stop.wait(every):
            look()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    look()


def predicted_eval_seconds(batches: int, tokens_per_batch: int, world: int, tokens_per_s: float) -> float | None:
    """An eval's duration from the training throughput just measured: a forward costs about a third of a training
    step's forward and backward. None before any throughput is known."""
    if tokens_per_s <= 0:
        return None
    return batches * tokens_per_batch * world / (3 * tokens_per_s)
