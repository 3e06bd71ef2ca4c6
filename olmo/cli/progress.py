"""Progress bars for the long `olmo` commands and phases: on stderr, and only for a person watching.

A bar is drawn only when stderr is a terminal and the command is not in `--json` mode (a script or a log file
gets the final summary line, never bar frames). Every caller advances it by work *finished* (bytes written,
bytes verified), never by work merely read or queued, so 100% means done.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

from olmo.cli import jsonout
from olmo.progress import Advance, Phases

BYTE_PHASES = ("saving", "checking shards")  # counted in bytes; the others in items (eval: batches)


class _Bar:
    """`bar(nbytes, ntok=0)` advances; `bar.set_total(n)` when the total is learnt on the way."""

    def __init__(self, progress: Any, task: Any, tokens: bool):
        self.progress, self.task, self.tokens = progress, task, tokens
        self.counted, self.t0 = 0, time.perf_counter()

    def __call__(self, nbytes: int, ntok: int = 0) -> None:
        if self.progress is None:
            return
        if not self.tokens:
            self.progress.update(self.task, advance=nbytes)
            return
        self.counted += ntok
        rate = self.counted / max(time.perf_counter() - self.t0, 1e-9)
        self.progress.update(self.task, advance=nbytes, tok=f"{self.counted:,} tokens, {rate:,.0f} tok/s")

    def set_total(self, total: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, total=max(total, 1))


@contextlib.contextmanager
def bytes_bar(label: str, total: int | None, tokens: bool = False, quiet: bool = False) -> Iterator[_Bar]:
    """A bar over `total` bytes (None: not known yet, a pulsing bar); `advance(nbytes, ntok=0)` moves it (and
    counts tokens when `tokens`)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True, highlight=False)
    columns = [TextColumn(f"[bold]{label}"), BarColumn(), DownloadColumn(), TimeRemainingColumn()]
    if tokens:
        columns.insert(3, TextColumn("{task.fields[tok]}"))
    if quiet or jsonout.active() or not console.is_terminal:
        # no Progress at all: even a disabled one writes a newline to the console when it stops
        yield _Bar(None, None, tokens)
        return
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(label, total=None if total is None else max(total, 1), tok="")
        yield _Bar(progress, task, tokens)


@contextlib.contextmanager
def sized_bar(label: str, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """A bytes bar whose total the work learns as it goes: `advance(nbytes, total)`."""
    with bytes_bar(label, None, quiet=quiet) as bar:
        known = [0]

        def update(nbytes: int, total: int) -> None:
            if total != known[0]:
                known[0] = total
                bar.set_total(total)
            bar(nbytes)

        yield update


def phase_bars(quiet: bool = False) -> Phases:
    """The `Phases` the trainer's long phases (eval, checkpoint save, shard checks) draw on: a bar on stderr for a
    person watching (a terminal, not --json), by the phase's own unit; nothing otherwise."""

    @contextlib.contextmanager
    def phase(label: str, total: int) -> Iterator[Advance]:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True, highlight=False)
        if quiet or jsonout.active() or not console.is_terminal:
            yield lambda n: None
            return
        count = DownloadColumn() if label in BYTE_PHASES else MofNCompleteColumn()
        with Progress(TextColumn(f"[bold]{label}"), BarColumn(), count, TimeRemainingColumn(), console=console,
                      transient=True) as bar:
            task = bar.add_task(label, total=max(total, 1))
            yield lambda n: bar.update(task, advance=n)

    return phase
