"""The smoke run: the whole trainer, end to end, on the bundled tokenizer and corpus, in well under a minute.

It tokenizes olmo/assets/corpus.jsonl.gz with olmo/assets/tokenizer.json (the real prepare-data path), trains
the `tiny` model for ~20 steps on the GPU when there is one (else the CPU), evaluates, writes a checkpoint, and
reports whether the loss fell. `olmo train --smoke` prints it; `olmo-doctor verify` calls `run_smoke`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console

from olmo.config import DataConfig, ModelConfig, OptimConfig, TrainConfig
from olmo.corpus import CORPUS_PATH, TOKENIZER_PATH

# The loss "fell" when the mean of the last quarter of the steps is at least this much below the first step's
# loss. From ln(768) = 6.6 at initialisation the tiny model reaches about 4 in 20 steps on this corpus; a
# broken step (no gradient, a frozen LR, a data loader repeating one batch) stays within a few percent.
MIN_DROP = 0.15


@dataclass
class SmokeResult:
    device: str
    steps: int
    losses: list[float]
    tokens_per_s: float
    seconds: float
    loss_fell: bool
    eval_loss: float | None = None
    checkpoint: str | None = None

    def verdict(self) -> str:
        mark = "passed" if self.loss_fell else "FAILED (loss did not fall)"
        first, last = (self.losses[0], self.losses[-1]) if self.losses else (float("nan"), float("nan"))
        return (f"smoke run {mark}: {self.steps} steps on {self.device}, loss {first:.2f} -> {last:.2f}, "
                f"{self.tokens_per_s:,.0f} tokens/s, {self.seconds:.1f}s")


def smoke_config(run_dir: Path, data_dir: Path, device: str | None, steps: int) -> TrainConfig:
    return TrainConfig(
        model=ModelConfig.tiny(),
        data=DataConfig(paths=[str(data_dir)], seq_len=128, val_fraction=0.05),
        optim=OptimConfig(lr=1e-2, warmup_steps=max(1, steps // 10), schedule="cosine", final_lr_ratio=0.1),
        run_dir=str(run_dir), steps=steps, global_batch_size=8, micro_batch_size=8,
        device=device or "auto", log_interval=1, eval_batches=4, save_interval=steps, keep_last_n=1,
    )


def loss_fell(losses: list[float]) -> bool:
    if len(losses) < 4:
        return False
    tail = losses[-max(1, len(losses) // 4):]
    return sum(tail) / len(tail) < losses[0] * (1 - MIN_DROP)


def run_smoke(device: str | None = None, steps: int = 20, out_dir: Path | None = None,
              console: Console | None = None) -> SmokeResult:
    """Prepare the bundled data and train the tiny model for `steps` steps in `out_dir` (a fresh temp dir when
    None, removed afterwards). `device`: None/"auto" picks the GPU when torch can use one."""
    from olmo.parallel import World, resolve_device
    from olmo.prepare import find_inputs, load_tokenizer, prepare
    from olmo.train import train

    with tempfile.TemporaryDirectory(prefix="olmo-smoke-") as tmp:
        root = Path(out_dir) if out_dir else Path(tmp)
        tok = load_tokenizer(TOKENIZER_PATH)
        prepare(find_inputs([CORPUS_PATH]), root / "data", tok, shard_tokens=1 << 20, overwrite=True)
        run_dir = root / "run"
        if run_dir.exists():  # a previous smoke run in the same out_dir: start over, not resume
            import shutil

            shutil.rmtree(run_dir)
        cfg = smoke_config(run_dir, root / "data", device, steps)
        # The tiny model's matmuls are too small to gain from a second CPU thread, and on a busy machine
        # OpenMP workers spin-waiting for a core make a 2-thread run up to 10x slower (measured: 53 s vs 5 s).
        threads = torch.get_num_threads()
        if resolve_device(cfg.device, World()).type == "cpu":
            torch.set_num_threads(1)
        try:
            res = train(cfg, console=console)
        finally:
            torch.set_num_threads(threads)
        return SmokeResult(res.device, res.step, res.losses, res.tokens_per_s, res.seconds,
                           loss_fell(res.losses), res.eval_loss, str(res.checkpoint) if out_dir else None)
