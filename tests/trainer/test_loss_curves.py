"""Ours against OLMo-core 3.0.0 on the same weights, batches and hyperparameters (bench/loss_curves.py).

The slow test trains both for 10 steps from one OLMo-core-initialised checkpoint, with the warmup ending early so
the LR decay is compared too, and asserts the loss curves agree; then it puts back (bench --mismatch lr-shift) the
schedule this comparison found wrong (our decay counted 0-based steps, one step behind OLMo-core's) and asserts
the bench catches it.
Skipped only when ai2-olmo-core (the `olmo-core` extra) is not installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from olmo.config import OptimConfig
from olmo.optim.optimizer import lr_at

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loss_curves", ROOT / "bench" / "loss_curves.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("loss_curves", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
@pytest.mark.parametrize(("warmup", "total"), [(10, 100), (0, 50), (5, 5), (7, 3), (1, 1), (3, 4)])
def test_lr_schedule_is_olmo_cores(schedule: str, warmup: int, total: int) -> None:
    """Step index s here is OLMo-core's global step s + 1 (its Trainer counts before stepping)."""
    sched_mod = pytest.importorskip("olmo_core.optim", reason="ai2-olmo-core is not installed")
    kind = sched_mod.CosWithWarmup if schedule == "cosine" else sched_mod.LinearWithWarmup
    theirs = kind(warmup=warmup, alpha_f=0.1)
    cfg = OptimConfig(lr=1e-3, warmup_steps=warmup, schedule=schedule, final_lr_ratio=0.1)
    for s in range(total + 2):
        assert lr_at(s, total, cfg) == pytest.approx(theirs.get_lr(1e-3, s + 1, total), rel=1e-12, abs=0), s


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--tolerance", "nan"], ["--tolerance", "-1"],
                                  ["--steps", "5", "--warmup", "6"]])
def test_bad_arguments_are_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench().main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("loss_curves: ") and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_ten_steps_agree_with_olmo_core(tiny_data: Path, tmp_path: Path) -> None:
    pytest.importorskip("olmo_core", reason="ai2-olmo-core is not installed (pip install -e '.[olmo-core]')")
    bench = _bench()
    for shape in ("olmo2", "olmo3"):
        ours, theirs = bench.compare(bench.Run(shape=shape, steps=10, warmup=3), tmp_path / shape, tiny_data)
        assert len(ours) == len(theirs) == 10
        assert ours[-1] < ours[0] - 0.5  # it trained
        _, worst = bench.table(shape, ours, theirs)
        assert worst <= bench.TOLERANCE, (shape, ours, theirs)

    ours, theirs = bench.compare(bench.Run(shape="olmo2", steps=10, warmup=3), tmp_path / "shifted", tiny_data,
                                 mismatch="lr-shift")
    assert ours[:4] == pytest.approx(theirs[:4], rel=1e-5)  # the warmup is the same ...
    assert bench.table("olmo2", ours, theirs)[1] > 10 * bench.TOLERANCE  # ... the decay is not, and it shows
