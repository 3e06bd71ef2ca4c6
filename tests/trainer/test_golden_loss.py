"""The micro model's 20-step CPU loss curve against tests/goldens/loss_micro.txt (one "step loss" a line).

"Loss fell" passes whatever init, schedule or data order does; the curve itself does not. CPU float32 is
deterministic on one machine (test_resume_is_bit_identical holds it exactly) but not across CPUs and torch
builds, whose kernels sum in other orders: those differences stay far below the tolerance, while a change to
init, the schedule or the data order moves the curve by whole percents. Regenerate after an intended change:
`.venv/bin/python -m pytest -q tests/doctor/test_goldens.py tests/trainer/test_golden_loss.py --update-goldens`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import GOLDENS, REGENERATE, check_golden, updating_goldens

from olmo.config import TrainConfig
from olmo.train import train

GOLDEN = GOLDENS / "loss_micro.txt"
REL_TOL = 2e-3  # per step, relative


def _parse(text: str) -> list[tuple[int, float]]:
    rows = [line.split() for line in text.splitlines() if line.strip()]
    return [(int(step), float(loss)) for step, loss in rows]


def deviations(want: list[tuple[int, float]], got: list[tuple[int, float]]) -> list[tuple[int, float, float]]:
    """(step, golden, now) for every step that moved beyond the tolerance; other steps are a deviation too."""
    if [s for s, _ in got] != [s for s, _ in want]:
        return [(0, float(len(want)), float(len(got)))]
    return [(s, w, g) for (s, w), (_, g) in zip(want, got, strict=True) if abs(g - w) > REL_TOL * abs(w)]


def test_micro_loss_curve_matches_the_golden(tiny_data: Path, tmp_path: Path,
                                             micro: Callable[..., TrainConfig]) -> None:
    losses = train(micro(tiny_data, tmp_path / "run")).losses
    assert len(losses) == 20
    text = "".join(f"{step} {loss:.6f}\n" for step, loss in enumerate(losses, 1))
    if updating_goldens() or not GOLDEN.is_file():
        check_golden(GOLDEN, text)  # writes when updating, fails loudly when the file is missing
        return
    off = deviations(_parse(GOLDEN.read_text()), _parse(text))
    assert not off, ("loss curve moved beyond the tolerance (step, golden, now): "
                     f"{off[:5]}; if intended: {REGENERATE}")


def test_the_comparison_catches_a_moved_curve() -> None:
    want = _parse(GOLDEN.read_text())
    assert deviations(want, want) == []
    noise = [(s, loss * (1 + REL_TOL / 4)) for s, loss in want]  # float-order noise passes
    assert deviations(want, noise) == []
    late = [*want[:15], *[(s, loss * 1.01) for s, loss in want[15:]]]  # a 1% change at step 16 fails
    assert [s for s, _, _ in deviations(want, late)] == [16, 17, 18, 19, 20]
    assert deviations(want, want[:19])  # a shorter run fails
    with pytest.raises(ValueError):
        _parse("1 not-a-number\n")
