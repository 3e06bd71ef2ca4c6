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
from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
from olmo.errors import OlmoError
from olmo.parallel import World

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


def smoke_config(run_dir: Path, data_dir: Path, device: str | None, steps: int, world_size: int = 1) -> TrainConfig:
    """The smoke run's config. Under torchrun each process takes a micro-batch of 8, so the global batch follows
    the world size (8 per process) and every rank does the single-process amount of work."""
    return TrainConfig(
        model=ModelConfig.tiny(),
        data=DataConfig(paths=[str(data_dir)], seq_len=128, val_fraction=0.05),
        optim=OptimConfig(lr=1e-2, warmup_steps=max(1, steps // 10), schedule="cosine", final_lr_ratio=0.1),
        run_dir=str(run_dir), steps=steps, global_batch_size=8 * world_size, micro_batch_size=8,
        device=device or "auto", log_interval=1, eval_batches=4, save_interval=steps, keep_last_n=1,
    )


def _with_overrides(cfg: TrainConfig, overrides: list[str]) -> TrainConfig:
    from olmo.recipe import apply_override, config_to_dict, from_dict

    raw = config_to_dict(cfg)
    for item in overrides:
        apply_override(raw, item)
    return from_dict(raw, "--smoke")


def loss_fell(losses: list[float]) -> bool:
    if len(losses) < 4:
        return False
    tail = losses[-max(1, len(losses) // 4):]
    return sum(tail) / len(tail) < losses[0] * (1 - MIN_DROP)


def _shared_root(out_dir: Path | None, world: World) -> tuple[Path, Path | None]:
    """Where the run goes, the same directory on every rank: `out_dir`, or a temp dir rank 0 makes (and names to
    the others) which the caller deletes afterwards (the second value)."""
    if out_dir is not None:
        return Path(out_dir), None
    made = [tempfile.mkdtemp(prefix="olmo-smoke-") if world.rank == 0 else None]
    if world.world_size > 1:
        import torch.distributed as dist

        dist.broadcast_object_list(made, src=0)
    assert made[0] is not None
    return Path(made[0]), Path(made[0]) if world.rank == 0 else None


def _fresh_run_dir(run_dir: Path, data: Path) -> None:
    """The bundled corpus prepared in `data` (reused when already there), and an empty `run_dir` holding the smoke
    run's marker. A folder there that an earlier smoke run did not write (olmo/outputs.py) is refused before
    anything is written; an earlier smoke run's files are removed, and only those: start over, not resume."""
    from olmo import outputs
    from olmo.data.prepare import find_inputs, load_tokenizer, prepare

    previous = outputs.claim(run_dir, "train --smoke")
    outputs.claim(data, "prepare-data", "--keep")  # refused here in the user's words, before anything is written
    prepare(find_inputs([CORPUS_PATH]), data, load_tokenizer(TOKENIZER_PATH), shard_tokens=1 << 20, overwrite=True)
    if previous.state == "own" and outputs.remove_own(run_dir, previous.kind) is not None:
        raise OlmoError(f"{run_dir} changed while the smoke run started (files it did not write appeared); move "
                        "them out or choose another --keep")
    run_dir.mkdir(parents=True, exist_ok=True)
    outputs.write_marker(run_dir, "train --smoke")


def run_smoke(device: str | None = None, steps: int = 20, out_dir: Path | None = None,
              console: Console | None = None, overrides: list[str] | None = None) -> SmokeResult:
    """Prepare the bundled data and train the tiny model for `steps` steps in `out_dir` (kept), or in a temp dir
    removed afterwards. `device`: None/"auto" picks the GPU when torch can use one. Under torchrun every process
    calls this: rank 0 prepares the data, all train (data parallel; with several nodes, `out_dir` must be on a
    filesystem they share). `overrides` are `--set` items applied to the smoke config."""
    import shutil

    from olmo import parallel
    from olmo.train import train

    world = parallel.world_from_env()
    if world.world_size > 1:  # joined here, not in train(), so the ranks can agree on the directory first
        parallel.init_distributed(world, parallel.resolve_device(device or "auto", world))
    root, remove = _shared_root(out_dir, world)
    try:
        run_dir = root / "run"
        if world.rank == 0:
            _fresh_run_dir(run_dir, root / "data")
        parallel.barrier()
        cfg = _with_overrides(smoke_config(run_dir, root / "data", device, steps, world.world_size), overrides or [])
        # The tiny model's matmuls are too small to gain from a second CPU thread, and on a busy machine
        # OpenMP workers spin-waiting for a core make a 2-thread run up to 10x slower (measured: 53 s vs 5 s).
        threads = torch.get_num_threads()
        if parallel.resolve_device(cfg.device, world).type == "cpu":
            torch.set_num_threads(1)
        try:
            res = train(cfg, console=console)
        finally:
            torch.set_num_threads(threads)
        return SmokeResult(res.device, res.step, res.losses, res.tokens_per_s, res.seconds,
                           loss_fell(res.losses), res.eval_loss, str(res.checkpoint) if out_dir else None)
    finally:
        if remove is not None:
            shutil.rmtree(remove, ignore_errors=True)
