"""Numbers in a config that cannot make sense, and a warning when one step would take minutes.

`check_numbers` walks every float field of a TrainConfig (so a field added later is covered too) and refuses
NaN and infinity by name, then applies the ranges that each optimizer and model number must keep. `slow_step`
predicts a step's duration from its FLOPs (OLMo-core's count, olmo/config.py) and a generous rate for the
device, so it speaks only when a step certainly takes minutes (e.g. data.seq_len=80000 on a CPU).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Callable
from typing import Any, Protocol

from olmo.errors import ConfigError

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

# The range each number must keep, by dotted field name (the spelling of `--set`): (fields, whether a value is
# refused, the message after the name). Checked in this order; the first refusal is the one reported.
Rule = tuple[tuple[str, ...], Callable[[Any], bool], str]
RANGES: tuple[Rule, ...] = (
    (("optim.lr", "optim.eps", "model.rope_theta", "model.norm_eps", "model.init_std", "model.max_seq_len",
      "eval_batches"), lambda v: v <= 0, "must be greater than 0 (got {value})"),
    (("optim.weight_decay", "optim.grad_clip", "optim.warmup_steps", "optim.final_lr_ratio",
      "model.z_loss_multiplier", "eval_interval", "keep_last_n", "seed", "data.seed"),
     lambda v: v < 0, "must not be negative (got {value})"),
    # checks and FLOP counts walk the layers: a typo must not hang them
    (("model.n_layers",), lambda v: v > MAX_LAYERS,
     f"({{value:,}}) is more than olmo builds (at most {MAX_LAYERS:,}; OLMo's largest models have 64)"),
    (("model.d_model", "model.mlp_hidden", "model.n_heads", "model.vocab_size", "model.max_seq_len",
      "data.seq_len", "model.head_dim", "model.n_kv_heads"),
     lambda v: v is not None and v > MAX_WIDTH, f"({{value:,}}) is more than olmo builds (at most {MAX_WIDTH:,})"),
    (("steps", "global_batch_size", "micro_batch_size"), lambda v: v > MAX_COUNT,
     f"({{value:,}}) is more than olmo counts to (at most {MAX_COUNT:,})"),
    (("optim.final_lr_ratio",), lambda v: v > 1, "must be between 0 and 1 (got {value})"),
    (("model.n_kv_heads", "model.head_dim", "data.vocab_size"), lambda v: v is not None and v <= 0,
     "must be a positive number (got {value})"),
)


class _Sequences(Protocol):
    @property
    def seq_len(self) -> int: ...


class StepShape(Protocol):
    """What the step-time prediction reads of a TrainConfig (olmo/config.py imports this module for its checks,
    so this module does not import it back)."""

    @property
    def data(self) -> _Sequences: ...

    @property
    def global_batch_size(self) -> int: ...

    def flops_per_step(self) -> int: ...


def _numbers(obj: Any, kind: type, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted name, value) of every number of `kind` (float or int; a bool is neither) in `obj`'s dataclass
    fields, lists included."""
    def of_kind(v: object) -> bool:
        return isinstance(v, kind) and not isinstance(v, bool)

    out: list[tuple[str, Any]] = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        name = prefix + f.name
        if dataclasses.is_dataclass(value):
            out += _numbers(value, kind, name + ".")
        elif of_kind(value):
            out.append((name, value))
        elif isinstance(value, list):
            out += [(f"{name}[{i}]", v) for i, v in enumerate(value) if of_kind(v)]
    return out


def field_value(cfg: object, dotted: str) -> Any:
    """The value of the field `dotted` (e.g. "optim.lr") of a config."""
    return functools.reduce(getattr, dotted.split("."), cfg)


def shown_int(value: int) -> str:
    """An integer for a message: in full when short, else its sign, leading digits and length (a 10,000-digit
    value must not become a 10,000-character line)."""
    if value.bit_length() <= 64:
        return f"{value:,}"
    return f"{'-' if value < 0 else ''}a number of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"


def check_numbers(cfg: object) -> None:
    """ConfigError naming the first field of a TrainConfig that is NaN/infinite or outside the range it can have."""
    for name, value in _numbers(cfg, float):
        if not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number (got {value})")
    # every whole number, a field added later included: a seed or count past 2**53 is a typo, and one past 2**64
    # would reach torch.manual_seed or a tensor size as an overflow traceback
    for name, value in _numbers(cfg, int):
        if abs(value) > MAX_COUNT:
            raise ConfigError(f"{name} ({shown_int(value)}) is more than olmo counts to (at most {MAX_COUNT:,})")
    for names, refused, message in RANGES:
        for name in names:
            value = field_value(cfg, name)
            if refused(value):
                raise ConfigError(f"{name} {message.format(value=value)}")


def step_seconds(cfg: StepShape, device_kind: str, world_size: int = 1, peak: float | None = None) -> float:
    """A lower bound of one optimizer step's duration on `device_kind` ('cpu' or 'cuda')."""
    flops = cfg.flops_per_step()
    if device_kind == "cuda":
        rate = peak or GPU_FLOPS
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        rate = CPU_FLOPS_PER_CORE * cores
    return flops / (rate * max(world_size, 1))


def slow_step(cfg: StepShape, device_kind: str, world_size: int = 1, peak: float | None = None) -> str | None:
    """A one-line warning when a step is predicted to take a minute or more, else None."""
    sec = step_seconds(cfg, device_kind, world_size, peak)
    if sec < WARN_SECONDS:
        return None
    flops = cfg.flops_per_step()
    return (f"one step is predicted to take at least {sec / 60:,.0f} minute(s) on {device_kind} "
            f"({flops / 1e12:,.0f} TFLOP per step: {cfg.global_batch_size} x {cfg.data.seq_len} tokens); "
            "lower data.seq_len or global_batch_size, or train on a GPU")
