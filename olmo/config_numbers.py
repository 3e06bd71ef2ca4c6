"""Numbers in a config that cannot make sense, and a warning when one step would take minutes.

`check_numbers` walks every float field of a TrainConfig (so a field added later is covered too) and refuses
NaN and infinity by name, then applies the ranges that each optimizer and model number must keep. `slow_step`
predicts a step's duration from its FLOPs (OLMo-core's count, olmo/config.py) and a generous rate for the
device, so it speaks only when a step certainly takes minutes (e.g. data.seq_len=80000 on a CPU).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING, Any

from olmo.errors import ConfigError

if TYPE_CHECKING:
    from olmo.config import TrainConfig

# FLOP/s a training step does not exceed on the device kind, so a predicted time is not an overestimate: per
# CPU core about an AVX-512 core's fp32 peak (2 FMA units x 16 lanes x 2 FLOPs x 3 GHz); for a GPU the fastest
# GPU's dense bf16 peak.
CPU_FLOPS_PER_CORE = 2e11
GPU_FLOPS = 2e15
WARN_SECONDS = 60.0
MAX_LAYERS = 4096
# Widths, lengths and counts past these are typos (OLMo's largest: d_model 8192, vocab ~200K, 1M-token
# contexts, trillions of tokens); refused before a tensor is sized from them or a loop walks them.
MAX_WIDTH = 2**24
MAX_COUNT = 2**53


def _floats(obj: Any, prefix: str = "") -> list[tuple[str, float]]:
    """(dotted name, value) of every float in `obj`'s dataclass fields, lists included."""
    out: list[tuple[str, float]] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = prefix + f.name
        if dataclasses.is_dataclass(value):
            out += _floats(value, name + ".")
        elif isinstance(value, float):
            out.append((name, value))
        elif isinstance(value, list):
            out += [(f"{name}[{i}]", v) for i, v in enumerate(value) if isinstance(v, float)]
    return out


def check_numbers(cfg: TrainConfig) -> None:
    """ConfigError naming the first field that is NaN/infinite or outside the range it can have."""
    for name, value in _floats(cfg):
        if not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number (got {value})")
    m, d, o = cfg.model, cfg.data, cfg.optim
    positive = (("optim.lr", o.lr), ("optim.eps", o.eps), ("model.rope_theta", m.rope_theta),
                ("model.norm_eps", m.norm_eps), ("model.init_std", m.init_std),
                ("model.max_seq_len", m.max_seq_len), ("eval_batches", cfg.eval_batches))
    for name, value in positive:
        if value <= 0:
            raise ConfigError(f"{name} must be greater than 0 (got {value})")
    not_negative = (("optim.weight_decay", o.weight_decay), ("optim.grad_clip", o.grad_clip),
                    ("optim.warmup_steps", o.warmup_steps), ("optim.final_lr_ratio", o.final_lr_ratio),
                    ("model.z_loss_multiplier", m.z_loss_multiplier), ("eval_interval", cfg.eval_interval),
                    ("keep_last_n", cfg.keep_last_n), ("seed", cfg.seed), ("data.seed", d.seed))
    for name, value in not_negative:
        if value < 0:
            raise ConfigError(f"{name} must not be negative (got {value})")
    if m.n_layers > MAX_LAYERS:  # checks and FLOP counts walk the layers: a typo must not hang them
        raise ConfigError(f"model.n_layers ({m.n_layers:,}) is more than olmo builds (at most {MAX_LAYERS:,}; "
                          "OLMo's largest models have 64)")
    for name, value in (("model.d_model", m.d_model), ("model.mlp_hidden", m.mlp_hidden),
                        ("model.n_heads", m.n_heads), ("model.vocab_size", m.vocab_size),
                        ("model.max_seq_len", m.max_seq_len), ("data.seq_len", d.seq_len),
                        ("model.head_dim", m.head_dim or 0), ("model.n_kv_heads", m.n_kv_heads or 0)):
        if value > MAX_WIDTH:
            raise ConfigError(f"{name} ({value:,}) is more than olmo builds (at most {MAX_WIDTH:,})")
    for name, value in (("steps", cfg.steps), ("global_batch_size", cfg.global_batch_size),
                        ("micro_batch_size", cfg.micro_batch_size)):
        if value > MAX_COUNT:
            raise ConfigError(f"{name} ({value:,}) is more than olmo counts to (at most {MAX_COUNT:,})")
    if o.final_lr_ratio > 1:
        raise ConfigError(f"optim.final_lr_ratio must be between 0 and 1 (got {o.final_lr_ratio})")
    for name, count in (("n_kv_heads", m.n_kv_heads), ("head_dim", m.head_dim)):
        if count is not None and count <= 0:
            raise ConfigError(f"model.{name} must be a positive number (got {count})")
    if d.vocab_size is not None and d.vocab_size <= 0:
        raise ConfigError(f"data.vocab_size must be a positive number (got {d.vocab_size})")


def step_seconds(cfg: TrainConfig, device_kind: str, world_size: int = 1, peak: float | None = None) -> float:
    """A lower bound of one optimizer step's duration on `device_kind` ('cpu' or 'cuda')."""
    flops = cfg.model.flops_per_token(cfg.data.seq_len) * cfg.global_batch_size * cfg.data.seq_len
    if device_kind == "cuda":
        rate = peak or GPU_FLOPS
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        rate = CPU_FLOPS_PER_CORE * cores
    return flops / (rate * max(world_size, 1))


def slow_step(cfg: TrainConfig, device_kind: str, world_size: int = 1, peak: float | None = None) -> str | None:
    """A one-line warning when a step is predicted to take a minute or more, else None."""
    sec = step_seconds(cfg, device_kind, world_size, peak)
    if sec < WARN_SECONDS:
        return None
    flops = cfg.model.flops_per_token(cfg.data.seq_len) * cfg.global_batch_size * cfg.data.seq_len
    return (f"one step is predicted to take at least {sec / 60:,.0f} minute(s) on {device_kind} "
            f"({flops / 1e12:,.0f} TFLOP per step: {cfg.global_batch_size} x {cfg.data.seq_len} tokens); "
            "lower data.seq_len or global_batch_size, or train on a GPU")
