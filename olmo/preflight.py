"""Everything `olmo train` checks and opens before it builds a model, done once per run.

`preflight` validates the config, checks run_dir (a folder, not in use, no checkpoints unless --resume), the device
and a named attention backend, the checkpoint to resume or `init_from` (whole, readable, the same model), and opens
the data (shards checked, the loader and the eval batches made). It needs no model, so the CLI runs it before the
doctor's slower probes and hands its result to `train`, which uses it instead of checking again; `train` called
as a library runs it itself. The checks that need the other ranks or the saved config (`check_shared_run_dir`,
`check_resumed_config`) are here too, called by `train.setup` once the process group exists.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from olmo import checkpoint, checkpoint_leftovers, outputs, parallel, progress
from olmo.config import ConfigError, TrainConfig, check_vocab, validate
from olmo.data.loader import ShardLoader, Source, TokenWindows, eval_batches, open_source, split_indices
from olmo.fsutil import atomic_write_bytes, check_output_dir, read_small
from olmo.hints import set_arg
from olmo.interop import olmo_core as core
from olmo.lock import DirLock
from olmo.nn.attention import get_backend
from olmo.parallel import World, resolve_device, world_from_env
from olmo.progress import Phases
from olmo.recipe import config_to_dict


@dataclass
class Checked:
    """What preflight found: where the run goes, what it starts from, and its data, open and ready."""

    world: World
    device: torch.device
    ckpt: Path | None  # the run_dir's latest checkpoint (resumed from only with --resume)
    init_path: Path | None  # the checkpoint `init_from` names, when the run starts from it
    loader: ShardLoader
    val: list[torch.Tensor]

    def still_holds(self, cfg: TrainConfig) -> bool:
        """False when run_dir's checkpoints changed since (another run finished there while the doctor ran)."""
        return checkpoint.latest(Path(cfg.run_dir)) == self.ckpt


def build_data(cfg: TrainConfig, world: World, say: Any = None,
               phases: Phases = progress.silent) -> tuple[ShardLoader, list[torch.Tensor]]:
    """The training loader and the eval micro-batches; raises ConfigError for data the model cannot use (a
    different tokenizer's vocab, too few sequences for one batch, missing shards)."""
    windows = _checked_windows(cfg.data.paths, cfg, world, say, phases)
    train_idx, val_idx = split_indices(len(windows), 0.0 if cfg.data.val_paths else cfg.data.val_fraction)
    loader = ShardLoader(windows, train_idx, cfg.global_batch_size, cfg.micro_batch_size, cfg.data.seed,
                         world.rank, world.world_size)
    if cfg.data.val_paths:  # a separate split: all of it is eval data
        windows = _checked_windows(cfg.data.val_paths, cfg, world, say, phases)
        val_idx = np.arange(len(windows))
    val = eval_batches(windows, val_idx, cfg.micro_batch_size, cfg.eval_batches, world.rank, world.world_size)
    return loader, val


def _checked_windows(paths: list[str], cfg: TrainConfig, world: World, say: Any, phases: Phases) -> TokenWindows:
    """The shards of `paths` checked against the model (vocab, sizes, checksums, ids), cut into sequences."""
    source = open_source(paths, cfg.data)
    if source.vocab_size:
        check_vocab(cfg.model.vocab_size, source.vocab_size, source.where)
    check_source(source, cfg.model.vocab_size, world, say, phases)
    return TokenWindows(source, cfg.data.seq_len)


def check_source(source: Source, model_vocab: int, world: World, say: Any = None,
                 phases: Phases = progress.silent) -> None:
    """Sizes, checksums and the largest token id of every shard, before the first step (olmo/data/shard_check.py).
    Ids must be below the tokenizer's vocab when the shards say which, else below the model's embedding rows."""
    from olmo.data import shard_check
    if source.vocab_size and source.vocab_size <= model_vocab:
        limit, hint = source.vocab_size, "the shard is damaged: rerun `olmo prepare-data` for it"
    else:
        limit, hint = model_vocab, ("the shards were made with a larger tokenizer: raise model.vocab_size or "
                                    "tokenize with the model's tokenizer")
    shard_check.check(source.checks, limit, hint, scan_data=world.is_main, say=say, phases=phases)


def preflight(cfg: TrainConfig, resume: bool, say: Any = None, validated: bool = False,
              phases: Phases = progress.silent) -> Checked:
    """Every check that needs no model: config (skipped when the caller has just `validated` it), device, attention
    backend, run_dir, checkpoints, data. Cheap, so the CLI runs it before the (slower) doctor check and a bad recipe
    fails in a second."""
    world = world_from_env()
    if not validated:
        validate(cfg, world.world_size)
    check_output_dir(Path(cfg.run_dir), "run_dir")
    if world.is_main:
        DirLock(Path(cfg.run_dir), "run_dir").check_free()  # say "in use" now, not after the doctor's probes
    device = resolve_device(cfg.device, world)
    _check_kernels(cfg, device)
    outputs.check_run_dir(Path(cfg.run_dir))  # nothing in it that a run would replace and did not write
    ckpt = _checkpoint_to_resume(cfg.run_dir, resume)
    init_path = init_checkpoint(cfg) if cfg.init_from and not (ckpt and resume) else None
    loader, val = build_data(cfg, world, say, phases)
    return Checked(world, device, ckpt, init_path, loader, val)


def _check_kernels(cfg: TrainConfig, device: torch.device) -> None:
    """ConfigError when the attention backend named, or float8, cannot run on `device`."""
    if cfg.model.attn_backend != "auto":
        get_backend(cfg.model.attn_backend, device, windowed=cfg.model.windowed)
    if cfg.precision == "fp8":
        from olmo.nn import float8

        if (why := float8.problem(device)) is not None:
            raise ConfigError(why)


def _checkpoint_to_resume(run_dir_text: str, resume: bool) -> Path | None:
    """run_dir's latest checkpoint, whole and resumable when --resume asks for it; ConfigError for checkpoints a
    new run would write over, or damaged ones."""
    run_dir = Path(run_dir_text)
    root = run_dir / checkpoint.CHECKPOINTS
    if root.is_dir():
        # a link planted at an unfinished checkpoint's name: refused now, not at a save
        checkpoint_leftovers.leftovers(root)
    ckpt = checkpoint.latest(run_dir)
    if ckpt is None:
        _no_damaged_checkpoints(run_dir)
    elif not resume:
        raise ConfigError(f"{run_dir_text} already has checkpoints (latest: {ckpt.name}); pass --resume to continue "
                          "that run, or set run_dir to a new directory")
    else:  # a damaged checkpoint is found here, in a second, not after building the model
        checkpoint.require_whole(ckpt)
        _resume_state(ckpt)
    return ckpt


def _no_damaged_checkpoints(run_dir: Path) -> None:
    """When run_dir has no checkpoint olmo can resume: refuse if checkpoints/ is not a folder, or holds step
    folders anyway (ones that lost their train state, or OLMo-core's): training would write over them."""
    root = run_dir / checkpoint.CHECKPOINTS
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is not a directory; move it away or set run_dir to a new directory")
    steps = sorted(p.name for p in root.iterdir() if checkpoint.STEP_RE.match(p.name)) if root.is_dir() else []
    if steps:
        raise ConfigError(f"{root} holds {', '.join(steps[:3])} but no checkpoint olmo can resume (no "
                          f"{checkpoint.TRAIN_STATE}); restore it, start from OLMo-core's with --init-from, or set "
                          "run_dir to a new directory")


def _resume_state(ckpt: Path) -> dict[str, Any]:
    """The parts of train_state.json a resume reads, checked for shape (the file is data)."""
    state = checkpoint.read_state(ckpt)
    checkpoint.saved_config(ckpt, state)
    rngs = state.get("rng_ranks") or [state.get("rng")]
    ok = (_count(state.get("step")) and _count(state.get("tokens_seen")) and _loader_position(state.get("data_loader"))
          and isinstance(rngs, list) and all(isinstance(r, dict) for r in rngs))
    if not ok:
        raise ConfigError(f"checkpoint {ckpt} is damaged: {checkpoint.TRAIN_STATE} lacks the step, tokens, data "
                          "position or RNG states a resume needs; use another checkpoint")
    return state


def _count(v: object) -> bool:
    """A JSON integer a resume can count from (not a bool, not negative)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def _loader_position(loader: object) -> bool:
    """Whether a saved data-loader state has every count a resume reads, and a fingerprint."""
    counts = ("seed", "epoch", "batch_in_epoch", "global_batch_size", "seq_len")
    return (isinstance(loader, dict) and all(_count(loader.get(k)) for k in counts)
            and loader["global_batch_size"] > 0 and isinstance(loader.get("fingerprint"), str))


def init_checkpoint(cfg: TrainConfig) -> Path:
    """The checkpoint `init_from` names (a checkpoint dir or a run dir), checked against the model config."""
    assert cfg.init_from
    try:
        path = checkpoint.resolve(Path(cfg.init_from))
    except FileNotFoundError:
        raise ConfigError(f"init_from {cfg.init_from} is not a checkpoint or a run dir with checkpoints; give a "
                          "directory written by `olmo train`, `olmo import-hf` or OLMo-core (step<N>/model_and_optim/)"
                          ) from None
    checkpoint.require_whole(path)
    state = checkpoint.read_state(path)  # an unreadable or foreign config.json is refused here, in one line
    if checkpoint.is_olmo_core(path):
        core.read_model_config(path, training=True)  # training-only options (dropout, frozen weights) refused too
        config = state.get("config")
        if not (isinstance(config, dict) and isinstance(config.get("model"), dict)):
            _check_shapes(path, cfg)  # an OLMo-core checkpoint without config.json: the weights must fit the recipe
            return path
    _check_same_model(path, checkpoint.saved_config(path, state)["model"], cfg)
    return path


def _check_same_model(path: Path, saved: dict[str, Any], cfg: TrainConfig) -> None:
    """ConfigError naming each model setting of the recipe that differs from the checkpoint's, as --set options."""
    now = config_to_dict(cfg)["model"]
    differ = [set_arg(f"model.{k}", saved[k]) for k in now
              if k in saved and saved[k] != now[k] and k != "attn_backend"]
    if differ:
        raise ConfigError(f"init_from {path} holds a different model; add {' '.join(differ)} to the command, or "
                          "use the recipe.yaml that `olmo import-hf` wrote next to it")


def _check_shapes(path: Path, cfg: TrainConfig) -> None:
    problem = checkpoint.shape_mismatch(path, cfg.model)
    if problem:
        raise ConfigError(f"init_from {path} holds a different model ({problem}); set the recipe's model to match it")


def _read_marker(marker: Path) -> str | None:
    try:
        return read_small(marker, "checkpoint pointer").decode("utf-8", "replace")
    except OSError:
        return None


def check_shared_run_dir(run_dir: Path, world: World) -> None:
    """Checkpoints are written by all ranks into one directory that rank 0 renames, so with several nodes run_dir
    must be on shared storage. Rank 0 writes a marker; every rank must see it (NFS may lag a few seconds)."""
    import torch.distributed as dist

    nonce = [f"{time.time_ns()}-{random.getrandbits(32)}" if world.is_main else ""]
    dist.broadcast_object_list(nonce, src=0)
    marker = run_dir / f".olmo-shared-check-{nonce[0]}"  # a name of this call's own: nothing else is replaced
    if world.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(marker, nonce[0].encode())
    parallel.barrier()
    seen = False
    for _ in range(20):
        seen = marker.is_file() and _read_marker(marker) == nonce[0]
        if seen:
            break
        time.sleep(0.25)
    missing = parallel.all_reduce_sum(torch.tensor([0.0 if seen else 1.0]))
    parallel.barrier()
    if world.is_main:
        marker.unlink(missing_ok=True)
    if missing.item():
        raise ConfigError(f"run_dir {run_dir} is not shared by all nodes: {int(missing.item())} rank(s) cannot see "
                          "files rank 0 writes there; put run_dir on a filesystem every node mounts (NFS, Lustre)")


def _changed_settings(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The dotted names of the settings whose values differ between two configs (as dicts)."""
    changed = [f"{sec}.{k}" for sec in ("model", "data", "optim", "parallel") for k in now[sec]
               if saved.get(sec, {}).get(k) != now[sec][k]]
    return changed + [k for k in now if not isinstance(now[k], dict) and saved.get(k) != now[k]]


def check_resumed_config(saved: dict[str, Any], cfg: TrainConfig, say: Any) -> None:
    """ConfigError when the recipe's model differs from the checkpoint's; a warning naming any other changed
    setting (a resume may change how, not what, it trains)."""
    changed = _changed_settings(saved, config_to_dict(cfg))
    runtime_only = ("model.attn_backend", "model.fuse_projections", "model.residual_dtype")  # how, not what
    model_changes = [c for c in changed if c.startswith("model.") and c not in runtime_only]
    if model_changes:
        raise ConfigError(f"the checkpoint's model differs from the recipe ({', '.join(model_changes)}); "
                          "resume with the original model settings or start a new run_dir")
    if changed:
        from olmo.terminal import inert  # the changed values are the user's data, not markup

        say(f"[yellow]resuming with changed settings: {inert(', '.join(changed))}[/]")
