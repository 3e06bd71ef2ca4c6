"""Shared fixtures: the bundled corpus tokenized once per session, and a micro training config on it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from olmo.config import DataConfig, ModelConfig, OptimConfig, TrainConfig
from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
from olmo.data.prepare import find_inputs, load_tokenizer, prepare

# The models here are tiny: one intra-op thread is as fast as two on an idle 2-core CI box, and several times
# faster on a busy one (OpenMP workers spin-wait for a core another process holds).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled corpus as shards (3 of ~40K tokens, so the loader crosses shard boundaries)."""
    out = tmp_path_factory.mktemp("data") / "tiny"
    prepare(find_inputs([CORPUS_PATH]), out, load_tokenizer(TOKENIZER_PATH), shard_tokens=40_000)
    return out


def micro_config(data: Path, run_dir: Path, steps: int = 20) -> TrainConfig:
    """A 2-layer model small enough that 20 CPU steps take about a second, with grad accumulation 2."""
    return TrainConfig(
        model=ModelConfig(d_model=64, n_layers=2, n_heads=4, mlp_hidden=128, vocab_size=768, max_seq_len=128),
        data=DataConfig(paths=[str(data)], seq_len=64, val_fraction=0.05),
        optim=OptimConfig(lr=3e-3, warmup_steps=4),
        run_dir=str(run_dir), steps=steps, global_batch_size=8, micro_batch_size=4, device="cpu",
        log_interval=1, eval_interval=5, eval_batches=2, save_interval=10, keep_last_n=2,
    )


@pytest.fixture(scope="session")
def micro() -> Callable[..., TrainConfig]:
    """`micro(data_dir, run_dir, steps=20)` -> the micro TrainConfig."""
    return micro_config


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """`cli("train", "--smoke")` runs the real console entry point in-process: (exit code, stdout, stderr)."""
    import olmo.cli.common
    import olmo.cli.main

    for console in (olmo.cli.common.out, olmo.cli.common.err):
        monkeypatch.setattr(console, "_width", 200)  # no wrapping or truncation of long paths in assertions

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["olmo", *args])
        try:
            olmo.cli.main.main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        cap = capsys.readouterr()
        return code, cap.out, cap.err

    return run
