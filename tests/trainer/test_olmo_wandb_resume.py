"""W&B continues its run on `olmo train --resume`: the run id lives in run_dir/wandb_run_id and goes to
wandb.init(id=..., resume="allow"); a fresh run gets a new id. A stand-in `wandb` module records what the trainer
asked of it (no network, no login)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from olmo.config import TrainConfig
from olmo.metrics import WANDB_RUN_ID, wandb_run_id


class FakeWandb(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("wandb")
        self.inits: list[dict[str, Any]] = []
        self.logged: list[tuple[str, int | None]] = []

    def init(self, **kwargs: Any) -> Any:
        self.inits.append(kwargs)
        fake = self

        class Run:
            def log(self, scalars: dict[str, Any], step: int | None = None) -> None:
                fake.logged.append((kwargs["id"], step))

            def finish(self) -> None:
                pass

        return Run()


@pytest.fixture
def wandb(monkeypatch: pytest.MonkeyPatch) -> FakeWandb:
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    return fake


@pytest.mark.slow
def test_resume_continues_the_same_wandb_run(wandb: FakeWandb, tmp_path: Path, tiny_data: Path,
                                             micro: Callable[..., TrainConfig]) -> None:
    from olmo.train import train

    cfg = micro(tiny_data, tmp_path / "run", steps=2)
    cfg.wandb_project, cfg.save_interval, cfg.eval_interval = "p", 2, 100
    train(cfg)
    cfg.steps = 4
    train(cfg, resume=True)
    first, second = wandb.inits
    assert first["id"] == second["id"] and second["resume"] == "allow"
    assert (tmp_path / "run" / WANDB_RUN_ID).read_text().strip() == first["id"]
    steps = [s for i, s in wandb.logged if i == first["id"]]
    assert max(steps) >= 3 and min(steps) <= 1  # one W&B run holds both halves

    other = micro(tiny_data, tmp_path / "run2", steps=2)
    other.wandb_project = "p"
    train(other)
    assert wandb.inits[-1]["id"] != first["id"]  # another run_dir, another W&B run


@pytest.mark.parametrize("content", [b"", b"../../etc\n", b"\xff\xfe", b"A" * 300, b"has space"])
def test_a_damaged_id_file_starts_a_new_run_with_a_warning(content: bytes, tmp_path: Path) -> None:
    (tmp_path / WANDB_RUN_ID).write_bytes(content)
    warnings: list[str] = []
    run_id = wandb_run_id(tmp_path, resume=True, warn=warnings.append)
    assert run_id.isalnum() and run_id.islower() and len(run_id) == 8
    assert len(warnings) == 1 and "does not hold a W&B run id" in warnings[0]
    assert (tmp_path / WANDB_RUN_ID).read_text().strip() == run_id


def test_without_resume_a_stored_id_is_not_reused(tmp_path: Path) -> None:
    (tmp_path / WANDB_RUN_ID).write_text("abc123\n")
    assert wandb_run_id(tmp_path, resume=False) != "abc123"
    assert wandb_run_id(tmp_path, resume=True) == (tmp_path / WANDB_RUN_ID).read_text().strip()
