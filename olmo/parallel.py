"""Where the model runs and how it is wrapped: free functions applied to a plain model, in one documented order.

    parallelize(model, cfg):  activation checkpointing -> compile -> FSDP2 / DDP

The order matters (torchtitan's parallelize_llama explains it): compile wraps each block after activation
checkpointing has wrapped it, and data parallelism shards or replicates the compiled blocks last. This build
applies compile; activation checkpointing and FSDP2/DDP through torchrun are the next step and slot in here as
`apply_ac` and `apply_fsdp` / `apply_ddp` without touching the model or the loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from olmo.config import ConfigError, TrainConfig
from olmo.model import Transformer


@dataclass(frozen=True)
class World:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1


def world_from_env() -> World:
    """The process's place in a torchrun launch (RANK / LOCAL_RANK / WORLD_SIZE), or a single process."""
    return World(int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)),
                 int(os.environ.get("WORLD_SIZE", 1)))


def resolve_device(name: str, world: World) -> torch.device:
    """`auto` is this rank's GPU when CUDA works, else the CPU; an explicit cuda without CUDA is a usage error."""
    if name == "auto":
        return torch.device("cuda", world.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device '{name}' is not a torch device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device is '{name}' but torch cannot use CUDA here; run `olmo-doctor check` "
                              "or set device=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device '{name}' does not exist: {torch.cuda.device_count()} GPU(s) visible")
    return device


def autocast_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """bf16 autocast on GPUs (fp32 master weights and optimizer state), none (plain fp32) on the CPU."""
    if cfg.precision == "fp32" or (cfg.precision == "auto" and device.type != "cuda"):
        return None
    return torch.bfloat16


def apply_compile(model: Transformer) -> None:
    """torch.compile each block in place (Module.compile keeps parameter names, unlike wrapping it in
    torch.compile(), which adds `_orig_mod.`): blocks share one shape, so one compilation serves all layers."""
    for block in model.blocks.values():
        block.compile()


def parallelize(model: Transformer, cfg: TrainConfig, world: World) -> Transformer:
    if world.world_size > 1:
        raise ConfigError("multi-process training (torchrun with FSDP2/DDP) is not in this build yet; "
                          "run one process")
    if cfg.compile:
        apply_compile(model)
    return model
