"""Linear-time checks that do not depend on how fast or how busy the machine is.

A test never compares a duration with a fixed number of seconds (those budgets live in bench/, which prints
them against an anchor measured in the same run). It compares the same work at size n and at size 4n, in CPU
time of this process (time.process_time: other jobs on the box do not count), best of a few runs: a linear
parser takes about 4 times as long (less, with a fixed start-up cost), a quadratic one 16 times. The bound, 8
times, sits between the two with room for noise on either side. One step in cost at a particular size (the
regex engine's backtracking stack leaving the CPU cache, say) can push a single ratio past it, while quadratic
work pushes every ratio past it; so a pair over the bound is measured again one step up (4n against 16n), and
the check fails only when that pair is over the bound too.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

GROWTH = 4  # the large input is this many times the small one
BOUND = 2 * GROWTH  # linear: about GROWTH; quadratic: GROWTH ** 2
TRIES = 3


def cpu_seconds(run: Callable[[], object]) -> float:
    """CPU time this process spends in `run()` (garbage collection held off, so it is not billed at random)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.process_time()
        run()
        return time.process_time() - start
    finally:
        if enabled:
            gc.enable()


def growth(work: Callable[[T], object], small: T, large: T, slack_s: float = 0.0) -> tuple[float, float]:
    """(CPU seconds of work(small), of work(large)), each the best of up to TRIES runs; it stops measuring as soon
    as the pair is within BOUND (plus slack_s)."""
    best_small = best_large = float("inf")
    for _ in range(TRIES):
        best_small = min(best_small, cpu_seconds(lambda: work(small)))
        best_large = min(best_large, cpu_seconds(lambda: work(large)))
        if best_large <= BOUND * best_small + slack_s:
            break
    return best_small, best_large


def assert_linear(work: Callable[[T], object], make: Callable[[int], T], n: int, what: object = "",
                  slack_s: float = 0.0) -> None:
    """Fails when work(make(GROWTH * n)) costs more than BOUND times work(make(n)), and one step up as well.
    slack_s is timer noise allowed on inputs so small that a run takes microseconds (a few pattern searches)."""
    pairs = []
    for size in (n, GROWTH * n):
        small, large = growth(work, make(size), make(GROWTH * size), slack_s)
        pairs.append(f"{small:.4f} s -> {large:.4f} s ({large / max(small, 1e-9):.1f}x)")
        if large <= BOUND * small + slack_s:
            return
    raise AssertionError(f"{what}: each {GROWTH}x the input took more than {BOUND}x the CPU time: {'; '.join(pairs)} "
                         f"(linear work takes about {GROWTH}x)")
