"""Loss curves, ours against OLMo-core 3.0.0 on the same data, weights and hyperparameters (issue 17), on the CPU.

For each shape (a tiny OLMo 2 model; the same with OLMo 3's sliding windows, 3 windowed layers in 4, the last
layer full), in fp32 on the CPU:

1. OLMo-core builds its model and initialises it (`init_weights`, its init seed) and writes it as a checkpoint
   with its own `save_model_and_optim_state`, plus the config.json its trainer writes.
2. Ours trains from that checkpoint (`init_from`, the same as `olmo train --init-from`) through `olmo.train.train`
   on our shards of the bundled corpus, logging the mean cross-entropy of every step.
3. OLMo-core's model trains on the identical batches (drawn from our data loader in the same order) the way its
   TransformerTrainModule steps: per-micro-batch `loss_reduction="sum"` divided by the batch's label count, its
   z-loss, `_clip_grad_norm`, its CosWithWarmup scheduler (`set_lr` at 1-based global steps), torch AdamW with
   OLMo-core's param-group override (no weight decay on the embedding), as OLMo-core's OLMo 2/3 scripts set it.

Prints `step | ours | OLMo-core | diff` and the largest relative difference; exits 1 when it is above the
tolerance, 2 when OLMo-core is not installed (`pip install -e '.[olmo-core]'`). fp32 on the CPU has no
nondeterministic kernels, so "within noise" is float summation order here: single fp32 ulps of the loss (~2e-7
relative) that do not grow over 50 steps. `--mismatch NAME` makes one deliberate difference on our side (z-loss
off, no clipping, decay on the embedding, another AdamW eps, the old LR schedule) to show the tolerance catches
it: each moves the 50-step curve by 2e-4 or more (bench/RESULTS.md).

    python3 bench/loss_curves.py [--shape olmo2|olmo3|both] [--steps 50] [--warmup 10] [--tolerance 1e-4]
    python3 bench/loss_curves.py --shape olmo2 --mismatch z-loss-off     # must exit 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from olmo.config import DataConfig, ModelConfig, OptimConfig, TrainConfig  # noqa: E402
from olmo.interop import olmo_core as core  # noqa: E402

VOCAB = 768  # the bundled 766-token tokenizer, padded to a multiple of 128
TOLERANCE = 1e-4  # max |ours - core| / core over all steps: ~400x the fp32 noise seen over 50 steps (2.6e-7),
# below the smallest deliberate mismatch of MISMATCHES over 50 steps (z-loss off: 2.4e-4)


def _zero_based_decay(step: int, total: int, cfg: OptimConfig) -> float:
    """Our LR schedule before it counted steps as OLMo-core does: the decay one step late, the peak held twice."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    final = cfg.lr * cfg.final_lr_ratio
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
    return final + (cfg.lr - final) * 0.5 * (1 + math.cos(math.pi * progress))


def _decay_everything(model: torch.nn.Module, cfg: OptimConfig, *args: Any, **kw: Any) -> torch.optim.AdamW:
    from olmo.optim.optimizer import build_optimizer

    opt = build_optimizer(model, cfg, *args, **kw)
    for group in opt.param_groups:
        group["weight_decay"] = cfg.weight_decay
    return opt


# --mismatch NAME: one deliberate difference on our side, to show what the tolerance catches (the bench must fail)
MISMATCHES: dict[str, str] = {
    "z-loss-off": "ours without z-loss (OLMo-core keeps 1e-5)",
    "no-clip": "ours without gradient clipping",
    "decay-embeddings": "ours with weight decay on the embedding too",
    "eps": "ours with AdamW eps 1e-6 instead of 1e-8",
    "lr-shift": "ours with the LR decay counted from 0-based steps (our schedule before it was fixed)",
}


def apply_mismatch(name: str, cfg: TrainConfig, stack: contextlib.ExitStack) -> None:
    """Change our side of the comparison as MISMATCHES[name] says, until `stack` closes."""
    from unittest import mock

    if name == "z-loss-off":
        cfg.model.z_loss_multiplier = 0.0
    elif name == "no-clip":
        cfg.optim.grad_clip = 0.0
    elif name == "eps":
        cfg.optim.eps = 1e-6
    elif name == "decay-embeddings":
        stack.enter_context(mock.patch("olmo.train.build_optimizer", _decay_everything))
    elif name == "lr-shift":
        stack.enter_context(mock.patch("olmo.train.lr_at", _zero_based_decay))


@dataclass
class Run:
    """One comparison's settings: the same numbers go to both trainers."""

    shape: str
    steps: int = 50
    seq_len: int = 128
    global_batch: int = 8
    micro_batch: int = 4  # 2 micro-batches per step: gradient accumulation is compared too
    lr: float = 3e-3
    warmup: int = 10
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    z_loss: float = 1e-5
    seed: int = 0


def core_config(shape: str) -> Any:
    """OLMo-core's TransformerConfig: olmo2_30M's recipe at width 64 (olmo3: its olmo3_7B windows, scaled)."""
    from olmo_core.nn.attention import SlidingWindowAttentionConfig
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    kw: dict[str, Any] = {}
    if shape == "olmo3":
        kw["sliding_window"] = SlidingWindowAttentionConfig(
            pattern=[32, 32, 32, -1], force_full_attention_on_first_layer=False,
            force_full_attention_on_last_layer=True)
    return TransformerConfig.llama_like(
        d_model=64, n_layers=4, n_heads=4, vocab_size=VOCAB, block_name=TransformerBlockType.reordered_norm,
        qk_norm=True, rope_theta=500_000, layer_norm_eps=1e-6, hidden_size_multiple_of=64, **kw)


def write_core_checkpoint(run: Run, save: Path) -> tuple[Any, Path]:
    """OLMo-core builds and initialises its model and saves it as its trainer would; returns (model, step dir)."""
    from olmo_core.distributed.checkpoint import save_model_and_optim_state

    cfg = core_config(run.shape)
    torch.manual_seed(run.seed)
    model = cfg.build(init_device="cpu")
    model.init_weights(max_seq_len=run.seq_len, device=torch.device("cpu"))
    step_dir = save / "step0"
    save_model_and_optim_state(step_dir / core.MODEL_AND_OPTIM, model)
    (step_dir / core.CONFIG_JSON).write_text(json.dumps({"model": cfg.as_config_dict()}))
    return model, step_dir


def our_config(run: Run, core_model_conf: dict[str, Any], data: Path, run_dir: Path, init: Path) -> TrainConfig:
    """Our TrainConfig: the model translated from OLMo-core's config.json, the shared hyperparameters."""
    model = ModelConfig(**core.model_config_dict(core_model_conf), max_seq_len=run.seq_len,
                        attn_backend="sdpa", z_loss_multiplier=run.z_loss)
    optim = OptimConfig(lr=run.lr, weight_decay=run.weight_decay, grad_clip=run.grad_clip,
                        warmup_steps=run.warmup, schedule="cosine", final_lr_ratio=0.1, fused=False)
    return TrainConfig(model=model, data=DataConfig(paths=[str(data)], seq_len=run.seq_len, seed=run.seed),
                       optim=optim, run_dir=str(run_dir), steps=run.steps, global_batch_size=run.global_batch,
                       micro_batch_size=run.micro_batch, seed=run.seed, init_from=str(init), device="cpu",
                       precision="fp32", log_interval=1, eval_batches=1, save_interval=10 * run.steps,
                       keep_last_n=1)


def ours(cfg: TrainConfig) -> list[float]:
    from olmo.train import train

    return train(cfg).losses


def batches(cfg: TrainConfig) -> list[list[torch.Tensor]]:
    """The micro-batches of every step, in the order our trainer's loader gives them."""
    from olmo.parallel import World
    from olmo.preflight import build_data

    loader, _ = build_data(cfg, World(rank=0, local_rank=0, world_size=1))
    return [loader.next_batch() for _ in range(cfg.steps)]


def olmo_core(run: Run, model: Any, steps: list[list[torch.Tensor]]) -> list[float]:
    """OLMo-core's model trained the way its TransformerTrainModule.train_batch / optim_step do it."""
    from olmo_core.data.utils import get_labels
    from olmo_core.optim import AdamWConfig, CosWithWarmup, OptimGroupOverride
    from olmo_core.train.train_module.transformer.train_module import TransformerTrainModule

    optim = AdamWConfig(lr=run.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=run.weight_decay, fused=False,
                        group_overrides=[OptimGroupOverride(params=["embeddings.weight"],
                                                            opts=dict(weight_decay=0.0))]).build(model)
    sched = CosWithWarmup(warmup=run.warmup, alpha_f=0.1)
    trainer = types.SimpleNamespace(global_step=0, max_steps=run.steps)  # what Scheduler.set_lr reads
    clipper = types.SimpleNamespace(model=model)  # what TransformerTrainModule._clip_grad_norm reads
    model.train()
    losses = []
    for micro_batches in steps:
        trainer.global_step += 1  # OLMo-core's Trainer counts steps from 1 before stepping
        labels = [get_labels({"input_ids": mb}) for mb in micro_batches]
        n_tokens = sum((lab != -100).sum() for lab in labels)
        ce = torch.zeros(())
        for mb, lab in zip(micro_batches, labels, strict=True):
            out = model(mb, labels=lab, loss_reduction="sum", z_loss_multiplier=run.z_loss, loss_div_factor=n_tokens)
            out.loss.backward()
            ce += out.ce_loss.detach()
        TransformerTrainModule._clip_grad_norm(clipper, run.grad_clip)  # type: ignore[arg-type]
        for group in optim.param_groups:
            sched.set_lr(group, trainer)  # type: ignore[arg-type]
        optim.step()
        optim.zero_grad(set_to_none=True)
        losses.append(float(ce))
    return losses


def compare(run: Run, work: Path, data: Path, mismatch: str | None = None) -> tuple[list[float], list[float]]:
    """(our losses, OLMo-core's losses), one per step; `mismatch`: a name in MISMATCHES, applied to ours."""
    model, step_dir = write_core_checkpoint(run, work / f"{run.shape}-core-save")
    conf = json.loads((step_dir / core.CONFIG_JSON).read_text())["model"]
    cfg = our_config(run, conf, data, work / f"{run.shape}-ours", step_dir.parent)
    steps = batches(cfg)
    with contextlib.ExitStack() as stack:
        if mismatch:
            apply_mismatch(mismatch, cfg, stack)
        mine = ours(cfg)
    return mine, olmo_core(run, model, steps)


def table(shape: str, a: list[float], b: list[float]) -> tuple[str, float]:
    rows = [f"{shape}: step | ours | OLMo-core | diff", "---|---|---|---"]
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b, strict=True), start=1):
        worst = max(worst, abs(x - y) / abs(y))
        rows.append(f"{i} | {x:.6f} | {y:.6f} | {x - y:+.2e}")
    rows.append(f"max relative difference: {worst:.2e}")
    return "\n".join(rows), worst


def prepare_data(out: Path) -> Path:
    from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
    from olmo.data.prepare import find_inputs, load_tokenizer, prepare

    prepare(find_inputs([CORPUS_PATH]), out, load_tokenizer(TOKENIZER_PATH), shard_tokens=40_000)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=("olmo2", "olmo3", "both"), default="both")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=Run.warmup, help="LR warmup steps (fewer than --steps)")
    p.add_argument("--tolerance", type=float, default=TOLERANCE, help="max relative loss difference")
    p.add_argument("--mismatch", choices=sorted(MISMATCHES),
                   help="one deliberate difference on our side, to see the bench catch it: "
                        + "; ".join(f"{k}: {v}" for k, v in MISMATCHES.items()))
    args = p.parse_args(argv)
    problem = ("--steps must be at least 1" if args.steps < 1 else
               "--warmup must be between 0 and --steps" if not 0 <= args.warmup <= args.steps else
               "--tolerance must be a positive number" if not 0 < args.tolerance < math.inf else None)
    if problem:
        print(f"loss_curves: {problem}", file=sys.stderr)
        return 2
    try:
        import olmo_core  # noqa: F401
    except ImportError:
        print("loss_curves: OLMo-core is not installed; run pip install -e '.[olmo-core]'", file=sys.stderr)
        return 2
    torch.set_num_threads(min(2, torch.get_num_threads()))
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare_data(Path(tmp) / "data")
        for shape in ("olmo2", "olmo3") if args.shape == "both" else (args.shape,):
            a, b = compare(Run(shape=shape, steps=args.steps, warmup=args.warmup), Path(tmp), data,
                           args.mismatch)
            text, w = table(shape, a, b)
            print(text, flush=True)
            worst = max(worst, w)
    verdict = "agree" if worst <= args.tolerance else "DISAGREE"
    print(f"curves {verdict}: max relative difference {worst:.2e} (tolerance {args.tolerance:.1e})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
