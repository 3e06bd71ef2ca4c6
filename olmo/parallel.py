"""Where the model runs and how it is wrapped: free functions applied to a plain model, in one documented order.

    build_parallel_model(cfg, world, device, mesh):
        Transformer on the meta device (no memory)
        -> apply_float8    precision fp8: the blocks' projections multiply in float8 (olmo/nn/float8.py)
        -> apply_ac        activation checkpointing: wrap the chosen blocks
        -> apply_compile   torch.compile each block, when cfg.compile (the slot the speed work fills)
        -> apply_fsdp      FSDP2: fully_shard the embedding, each block, the head, then the root
                           | apply_ddp: replicate the whole model
        -> allocate on the device and initialise (each FSDP2 shard gets its slice of the full init)

The order is torchtitan's (parallelize_llama): compile wraps a block after activation checkpointing has wrapped
it, so the recomputation is compiled too, and data parallelism shards or replicates the finished blocks last, so
FSDP2's per-block all-gathers line up with the compiled regions. Every function takes a plain `Transformer` and
changes it in place; parameter names stay `blocks.3.attention.w_q.weight` (checkpoint_wrapper strips its prefix
from state dicts; `Module.compile` and the composable FSDP2/replicate APIs add none), so checkpoints do not depend
on how a run was wrapped.

Launch: `torchrun --nproc-per-node N -m olmo train RECIPE` sets RANK / LOCAL_RANK / WORLD_SIZE / MASTER_ADDR;
`init_distributed` joins that process group (NCCL for GPUs plus gloo for CPU-side objects; gloo alone on CPUs).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from olmo.config import ConfigError, TrainConfig
from olmo.model import Transformer, build_model


@dataclass(frozen=True)
class World:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, writes metrics and finishes checkpoints; the other ranks only compute."""
        return self.rank == 0


_LAUNCH_HINT = "launch with torchrun (which sets them), or unset RANK, LOCAL_RANK and WORLD_SIZE for one process"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw[:40]!r} is not a whole number; {_LAUNCH_HINT}") from None
    if not 0 <= value <= 1_000_000:
        raise ConfigError(f"{name}={value} is out of range; {_LAUNCH_HINT}")
    return value


def world_from_env() -> World:
    """The process's place in a torchrun launch (RANK / LOCAL_RANK / WORLD_SIZE), or a single process. Values that
    no launcher sets (not a number, WORLD_SIZE 0, a rank past the world, several processes without MASTER_ADDR)
    are a ConfigError in one line, before anything starts."""
    world = World(_env_int("RANK", 0), _env_int("LOCAL_RANK", 0), _env_int("WORLD_SIZE", 1))
    if world.world_size < 1:
        raise ConfigError(f"WORLD_SIZE=0 names no process; {_LAUNCH_HINT}")
    if world.rank >= world.world_size or world.local_rank >= world.world_size:
        raise ConfigError(f"RANK={world.rank} / LOCAL_RANK={world.local_rank} is not below WORLD_SIZE="
                          f"{world.world_size}; {_LAUNCH_HINT}")
    if world.world_size > 1 and not (os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        raise ConfigError(f"WORLD_SIZE={world.world_size} but MASTER_ADDR or MASTER_PORT is not set, so the "
                          f"processes cannot meet; {_LAUNCH_HINT}")
    return world


def resolve_device(name: str, world: World) -> torch.device:
    """`auto` is this rank's GPU when CUDA works, else the CPU; an explicit cuda without CUDA is a usage error.
    Under torchrun, `cuda` means this process's GPU (LOCAL_RANK), never GPU 0 for everyone."""
    if name == "auto":
        return torch.device("cuda", world.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device '{name}' is not a torch device; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):  # mps, xla, meta, xpu...: torch names them, olmo does not train there
        raise ConfigError(f"device '{name}' is not one olmo trains on; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device is '{name}' but torch cannot use CUDA here; run `olmo-doctor check` "
                              "or set device=cpu")
        if world.world_size > 1 or device.index is None:  # an index, always: set_device needs one
            device = torch.device("cuda", world.local_rank)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device '{device}' does not exist: {torch.cuda.device_count()} GPU(s) visible "
                              "(under torchrun, --nproc-per-node must not exceed the GPUs on the node)")
    return device


def uses_fsdp(cfg: TrainConfig, world: World) -> bool:
    return world.world_size > 1 and cfg.parallel.dp == "fsdp"


def compute_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """bf16 on GPUs (fp32 master weights and optimizer state), none (plain fp32) on the CPU; fp8 computes in bf16
    too, with the blocks' projections in float8 (apply_float8)."""
    if cfg.precision == "fp32" or (cfg.precision == "auto" and device.type != "cuda"):
        return None
    return torch.bfloat16


def autocast_dtype(cfg: TrainConfig, device: torch.device, world: World | None = None) -> torch.dtype | None:
    """The autocast dtype of the step, or None. Under FSDP2 the bf16 copy of each weight is made when it is
    gathered (MixedPrecisionPolicy), as OLMo-core and torchtitan do, so autocast would only add dispatch cost."""
    if world is not None and uses_fsdp(cfg, world):
        return None
    return compute_dtype(cfg, device)


# ------------------------------------------------------------------------------------------ the process group
_OWN_GROUP = False  # True when init_distributed created the process group (then shutdown destroys it)


def init_distributed(world: World, device: torch.device) -> Any:
    """Join torchrun's process group and return a 1-D device mesh named "dp", or None for a single process."""
    if device.type == "cuda":
        torch.cuda.set_device(device)  # the current device: where RNG state, NCCL and caching allocator live
    if world.world_size == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    global _OWN_GROUP
    if not dist.is_initialized():
        _OWN_GROUP = True
        if device.type == "cuda":
            # NCCL moves the tensors; gloo carries CPU objects (checkpoint planning, RNG states, barriers).
            dist.init_process_group("cuda:nccl,cpu:gloo", device_id=device,
                                    timeout=datetime.timedelta(minutes=30))
        else:
            dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
    return init_device_mesh(device.type, (world.world_size,), mesh_dim_names=("dp",))


def shutdown() -> None:
    """Destroy the process group init_distributed made (one a caller made before is left alone)."""
    global _OWN_GROUP
    if _OWN_GROUP and dist.is_initialized():
        dist.destroy_process_group()
    _OWN_GROUP = False


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum of `t` over all ranks (t itself in a single process)."""
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


# ------------------------------------------------------------------------------------ the wrapping functions
def apply_float8(model: Transformer, cfg: TrainConfig) -> None:
    """precision fp8: the blocks' projections multiply in float8 (first, so the float8 modules are what
    checkpointing recomputes, compile traces and FSDP2 shards). Preflight has checked that this device can."""
    if cfg.precision == "fp8":
        from olmo.nn.float8 import apply_float8 as convert

        convert(model)


def apply_ac(model: Transformer, cfg: TrainConfig, device: torch.device | None = None, world_size: int = 1
             ) -> str | None:
    """Activation checkpointing: a wrapped block keeps only its input and recomputes the rest in backward.

    full: every block; selective: every `ac_every`-th block (0, N, 2N, ...), trading memory for less recompute;
    auto: the fewest blocks that fit this GPU's memory (olmo/ac_plan.py; none on the CPU). Returns what auto
    decided, for the log, else None."""
    chosen, said = _blocks_to_checkpoint(model, cfg, device, world_size)
    if not chosen:
        return said
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for name, block in list(model.blocks.items()):
        if int(name) in chosen:
            # preserve_rng_state=False: the blocks draw no random numbers (no dropout), so saving RNG is waste.
            model.blocks[name] = checkpoint_wrapper(block, preserve_rng_state=False)
    return said


def _blocks_to_checkpoint(model: Transformer, cfg: TrainConfig, device: torch.device | None, world_size: int
                          ) -> tuple[set[int], str | None]:
    """The block indices `parallel.ac` picks, and for auto the line saying what it decided."""
    if cfg.parallel.ac == "auto":
        return _auto_blocks(cfg, device, world_size)
    n, every = len(model.blocks), cfg.parallel.ac_every
    return {"full": set(range(n)), "selective": set(range(0, n, every))}.get(cfg.parallel.ac, set()), None


def _auto_blocks(cfg: TrainConfig, device: torch.device | None, world_size: int) -> tuple[set[int], str]:
    """The fewest blocks whose checkpointing makes the step fit this GPU's memory (none off CUDA)."""
    if device is None or device.type != "cuda":
        return set(), "activation checkpointing (auto): none (not a CUDA device)"
    from olmo.ac_plan import plan_ac

    dtype = compute_dtype(cfg, device)
    plan = plan_ac(cfg.model, cfg.micro_batch_size, cfg.data.seq_len,
                   torch.cuda.get_device_properties(device).total_memory,
                   dtype_bytes=2 if dtype is not None else 4, world_size=world_size,
                   fsdp=world_size > 1 and cfg.parallel.dp == "fsdp",
                   compute_copies=cfg.optim.compute_copies and dtype is not None and world_size == 1)
    return set(plan.blocks), plan.checkpointing_line(cfg.model.n_layers)


def apply_compile(model: Transformer) -> None:
    """torch.compile each block and the final norm in place (the single-GPU speed work owns what happens here).
    Module.compile keeps parameter names, unlike wrapping in torch.compile(), which adds `_orig_mod.`; blocks
    share one shape, so one compilation serves all layers."""
    for block in model.blocks.values():
        block.compile()
    model.lm_head.norm.compile()  # the final norm: eager it is ~8 passes over the fp32 hidden states per step


def apply_fsdp(model: Transformer, mesh: Any, param_dtype: torch.dtype | None, reshard_after_forward: bool) -> None:
    """FSDP2, one unit per block plus the embedding and the head (as torchtitan), then the root. Gradients are
    reduced in fp32 whatever the compute dtype. Own units for the 100K-row embedding and head (a quarter of a 1B
    model) let their all-gather and reduce-scatter overlap with the blocks instead of all landing at the root.
    The last block and the head keep their gathered params after forward: backward needs them at once, so
    resharding would only buy a second all-gather."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    fully_shard(model.embeddings, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    blocks = list(model.blocks.values())
    for i, block in enumerate(blocks):
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward and i < len(blocks) - 1)
    fully_shard(model.lm_head, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def apply_ddp(model: Transformer, mesh: Any) -> None:
    """Replicate the model (DDP through the composable API, so names keep no `module.` prefix); rank 0's weights
    are broadcast at the start, gradients are all-reduced in buckets during backward."""
    from torch.distributed._composable.replicate import replicate

    replicate(model, device_mesh=mesh, bucket_cap_mb=100)


def _say(say: Callable[[str], Any] | None, note: str | None) -> None:
    if say is not None and note:
        say(note)


def build_parallel_model(cfg: TrainConfig, world: World, device: torch.device, mesh: Any,
                         say: Callable[[str], Any] | None = None) -> Transformer:
    """The model, wrapped in the order above and initialised from cfg.seed (identically for any world size);
    `say` hears what `parallel.ac: auto` decided."""
    if not uses_fsdp(cfg, world):
        model = build_model(cfg.model, device, cfg.seed)  # full weights on every rank (DDP broadcasts rank 0's)
        apply_float8(model, cfg)
        _say(say, apply_ac(model, cfg, device, world.world_size))
        if cfg.compile:
            apply_compile(model)
        if world.world_size > 1:
            apply_ddp(model, mesh)
        return model
    # FSDP2: wrap on the meta device, then allocate only this rank's shards: a model that does not fit on one
    # GPU never materialises whole (init draws one full parameter at a time; model.init_whole).
    with torch.device("meta"):
        model = Transformer(cfg.model)
    apply_float8(model, cfg)
    _say(say, apply_ac(model, cfg, device, world.world_size))
    if cfg.compile:
        apply_compile(model)
    apply_fsdp(model, mesh, compute_dtype(cfg, device), cfg.parallel.reshard_after_forward)
    model.to_empty(device=device)
    model.init_weights(cfg.seed)
    return model


# ------------------------------------------------------------------------------------- inside the training step
def grad_sync(model: torch.nn.Module, on: bool) -> None:
    """Reduce gradients in this backward (`on`) or only accumulate them locally: the no_sync of FSDP2 and of the
    composable DDP. A no-op in a single process."""
    setter = getattr(model, "set_requires_gradient_sync", None)
    if setter is not None:
        setter(on)


def clip_grad_norm_(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip to a global grad norm and return the norm before clipping. Under FSDP2 the grads are shards (DTensors)
    and the per-shard norms are partial sums, so the total is reduced over the ranks before clipping (as
    torchtitan's clip_grad_norm_ does); max_norm may be inf (no clipping, the norm is still reported)."""
    grads = [p.grad for p in params if p.grad is not None]
    if all(type(g) is torch.Tensor for g in grads):  # one process or DDP: torch's own, in any torch version
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    from torch.distributed.tensor import DTensor

    total = torch.nn.utils.get_total_norm(grads, foreach=None)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=None)
    return total
