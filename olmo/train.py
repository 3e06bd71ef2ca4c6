"""The training loop: set up (data, model, optimizer, resume), then a plain loop of steps, logs, evals, saves.

    for step in range(start, stop):
        lr = schedule(step); for each micro-batch: forward, loss / n_micro, backward
        clip grads, AdamW step; log; maybe eval; maybe checkpoint

Exact resume: everything a step depends on is either in the checkpoint (weights, AdamW moments, the data
loader's position, the RNG states) or a pure function of the step (the learning rate), so on the CPU a run
stopped at step 10 and resumed gives the same losses, bit for bit, as one that never stopped (tests/olmo).

Under torchrun every rank runs this same loop on its slice of each global batch (olmo/data/loader.py); FSDP2 or DDP
(olmo/parallel.py) reduce the gradients, the logged loss and the eval loss are averaged over all ranks, and only
rank 0 prints, writes metrics.jsonl and finishes checkpoints. A checkpoint resumes at any world size: the run
continues at the same global sample index with the same global batches, only split over a different number of
ranks, so the loss curve continues (up to float summation order).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from olmo import checkpoint, parallel
from olmo.config import ConfigError, TrainConfig, check_vocab, validate
from olmo.cuda_graph import CaptureFailed, GraphedStep
from olmo.data.loader import DataLoader, Source, TokenWindows, eval_batches, open_source, split_indices
from olmo.fsutil import atomic_write_bytes, check_output_dir, missing_dirs, remove_empty_dirs
from olmo.lock import DirLock
from olmo.metrics import MetricsLog, mfu, peak_flops
from olmo.model import Transformer
from olmo.nn.attention import get_backend
from olmo.optim.mixed_precision import MasterAdamW
from olmo.optim.optimizer import build_optimizer, clip_and_step, lr_at
from olmo.parallel import World, autocast_dtype, resolve_device, world_from_env
from olmo.recipe import config_to_dict, to_yaml


class TrainingFailed(RuntimeError):
    """Training could not go on (e.g. the loss became NaN); the message says what to try."""


@dataclass
class TrainResult:
    run_dir: Path
    device: str
    start_step: int
    step: int
    losses: list[float] = field(default_factory=list)  # training loss of every logged step in this process
    eval_loss: float | None = None
    tokens_per_s: float = 0.0  # mean over this process's steps after the first (which pays for warm-up)
    seconds: float = 0.0
    checkpoint: Path | None = None


@dataclass
class Setup:
    cfg: TrainConfig
    world: World
    device: torch.device
    amp: torch.dtype | None
    model: Transformer  # wrapped by olmo/parallel.py: FSDP2 shards, DDP replica or a plain module
    optimizer: torch.optim.AdamW
    loader: DataLoader
    val: list[torch.Tensor]
    step: int = 0
    tokens_seen: int = 0
    graph: GraphedStep | None = None  # the step replayed as one CUDA graph (cfg.cuda_graph, one GPU)
    say: Any = print
    carry: dict[str, bytes] = field(default_factory=dict)  # tokenizer files copied into every checkpoint


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def build_data(cfg: TrainConfig, world: World, say: Any = None) -> tuple[DataLoader, list[torch.Tensor]]:
    """The training loader and the eval micro-batches; raises ConfigError for data the model cannot use (a
    different tokenizer's vocab, too few sequences for one batch, missing shards)."""
    source = open_source(cfg.data.paths, cfg.data)
    if source.vocab_size:
        check_vocab(cfg.model.vocab_size, source.vocab_size, source.where)
    check_source(source, cfg.model.vocab_size, world, say)
    windows = TokenWindows(source, cfg.data.seq_len)
    train_idx, val_idx = split_indices(len(windows), 0.0 if cfg.data.val_paths else cfg.data.val_fraction)
    loader = DataLoader(windows, train_idx, cfg.global_batch_size, cfg.micro_batch_size, cfg.data.seed,
                        world.rank, world.world_size)
    if cfg.data.val_paths:
        vsrc = open_source(cfg.data.val_paths, cfg.data)
        if vsrc.vocab_size:
            check_vocab(cfg.model.vocab_size, vsrc.vocab_size, vsrc.where)
        check_source(vsrc, cfg.model.vocab_size, world, say)
        vwin = TokenWindows(vsrc, cfg.data.seq_len)
        val = eval_batches(vwin, np.arange(len(vwin)), cfg.micro_batch_size, cfg.eval_batches, world.rank,
                           world.world_size)
    else:
        val = eval_batches(windows, val_idx, cfg.micro_batch_size, cfg.eval_batches, world.rank, world.world_size)
    return loader, val


def check_source(source: Source, model_vocab: int, world: World, say: Any = None) -> None:
    """Sizes, checksums and the largest token id of every shard, before the first step (olmo/data/shard_check.py).
    Ids must be below the tokenizer's vocab when the shards say which, else below the model's embedding rows."""
    from olmo.data import shard_check
    if source.vocab_size and source.vocab_size <= model_vocab:
        limit, hint = source.vocab_size, "the shard is damaged: rerun `olmo prepare-data` for it"
    else:
        limit, hint = model_vocab, ("the shards were made with a larger tokenizer: raise model.vocab_size or "
                                    "tokenize with the model's tokenizer")
    shard_check.check(source.checks, limit, hint, scan_data=world.is_main, say=say)


def preflight(cfg: TrainConfig, resume: bool, say: Any = None) -> tuple[World, torch.device, Path | None]:
    """Every check that needs no model: config, device, attention backend, run_dir, data. Cheap, so the CLI
    runs it before the (slower) doctor check and a bad recipe fails in a second."""
    world = world_from_env()
    validate(cfg, world.world_size)
    check_output_dir(Path(cfg.run_dir), "run_dir")
    if world.is_main:
        DirLock(Path(cfg.run_dir), "run_dir").check_free()  # say "in use" now, not after the doctor's probes
    device = resolve_device(cfg.device, world)
    if cfg.model.attn_backend != "auto":
        get_backend(cfg.model.attn_backend, device, windowed=cfg.model.windowed)
    ckpt = checkpoint.latest(Path(cfg.run_dir))
    if ckpt and not resume:
        raise ConfigError(f"{cfg.run_dir} already has checkpoints (latest: {ckpt.name}); pass --resume to continue "
                          "that run, or set run_dir to a new directory")
    if ckpt and resume:  # a damaged checkpoint is found here, in a second, not after building the model
        checkpoint.require_whole(ckpt)
        _resume_state(ckpt)
    if cfg.init_from and not (ckpt and resume):
        init_checkpoint(cfg)
    build_data(cfg, world, say)
    return world, device, ckpt


def _resume_state(ckpt: Path) -> dict[str, Any]:
    """The parts of train_state.json a resume reads, checked for shape (the file is data)."""
    state = checkpoint.read_state(ckpt)
    checkpoint.saved_config(ckpt, state)
    loader = state.get("data_loader")
    counts = ("seed", "epoch", "batch_in_epoch", "global_batch_size", "seq_len")
    rngs = state.get("rng_ranks") or [state.get("rng")]
    ok = (isinstance(state.get("step"), int) and isinstance(state.get("tokens_seen"), int)
          and isinstance(loader, dict) and all(isinstance(loader.get(k), int) for k in counts)
          and loader["global_batch_size"] > 0 and isinstance(loader.get("fingerprint"), str)
          and isinstance(rngs, list) and all(isinstance(r, dict) for r in rngs))
    if not ok:
        raise ConfigError(f"checkpoint {ckpt} is damaged: {checkpoint.TRAIN_STATE} lacks the step, tokens, data "
                          "position or RNG states a resume needs; use another checkpoint")
    return state


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
    state = checkpoint.read_state(path)
    config = state.get("config")
    if checkpoint.is_olmo_core(path) and not (isinstance(config, dict) and isinstance(config.get("model"), dict)):
        _check_shapes(path, cfg)  # an OLMo-core checkpoint without config.json: the weights must fit the recipe
        return path
    saved = checkpoint.saved_config(path, state)["model"]
    now = config_to_dict(cfg)["model"]
    differ = [f"model.{k}={saved[k]!r}" for k in now if k in saved and saved[k] != now[k] and k != "attn_backend"]
    if differ:
        raise ConfigError(f"init_from {path} holds a different model; set {' '.join(differ)} (e.g. with --set), or "
                          "use the recipe.yaml that `olmo import-hf` wrote next to it")
    return path


def _check_shapes(path: Path, cfg: TrainConfig) -> None:
    problem = checkpoint.shape_mismatch(path, cfg.model)
    if problem:
        raise ConfigError(f"init_from {path} holds a different model ({problem}); set the recipe's model to match it")


def _choose_attention(cfg: TrainConfig, world: World, device: torch.device, say: Any) -> str:
    """Resolve `attn_backend: auto` (olmo/nn/attention_choice.py); rank 0 decides and every rank uses its answer."""
    from olmo.nn.attention_choice import choose, describe

    name = None
    if world.rank == 0:
        choice = choose(cfg.model, cfg.micro_batch_size, cfg.data.seq_len, device)
        say(describe(choice))
        name = choice.backend
    if world.world_size > 1:
        box = [name]
        torch.distributed.broadcast_object_list(box, src=0)
        name = box[0]
    assert name is not None
    return name


def setup(cfg: TrainConfig, resume: bool, say: Any) -> Setup:
    world, device, ckpt = preflight(cfg, resume)
    run_dir = Path(cfg.run_dir)
    _seed_everything(cfg.seed)
    mesh = parallel.init_distributed(world, device)
    if world.world_size > 1:
        check_shared_run_dir(run_dir, world)

    loader, val = build_data(cfg, world)

    if cfg.model.attn_backend == "auto":
        cfg.model.attn_backend = _choose_attention(cfg, world, device, say)
    model = parallel.build_parallel_model(cfg, world, device, mesh, say if world.is_main else None)
    amp = autocast_dtype(cfg, device, world)
    single_gpu = world.world_size == 1 and device.type == "cuda"
    optimizer = build_optimizer(model, cfg.optim, device, copies_dtype=amp if single_gpu else None)
    s = Setup(cfg, world, device, amp, model, optimizer, loader, val, say=say)
    if cfg.cuda_graph:
        if isinstance(optimizer, MasterAdamW):
            optimizer.lr_override = torch.zeros((), dtype=torch.float32, device=device)
            s.graph = GraphedStep(lambda *batches: _step_core(s, list(batches)), optimizer.zero_grad, device)
        else:
            say("[yellow]cuda_graph is on but ignored[/]: it needs one process on a GPU with bf16 "
                "and optim.compute_copies")
    if ckpt and resume:
        _check_resumed_config(checkpoint.saved_config(ckpt), cfg, say)
        state = checkpoint.load(ckpt, model, optimizer)
        loader.load_state_dict(state["data_loader"])
        s.step, s.tokens_seen = state["step"], state["tokens_seen"]
        saved_world = state.get("world_size", 1)
        # last: nothing after this may draw random numbers
        if not checkpoint.restore_rng(state, world.rank, world.world_size):
            say(f"resuming on {world.world_size} process(es) from a checkpoint saved on {saved_world}: same global "
                "batches from the same sample index, split over the new ranks (RNG states not restored)")
        say(f"resumed from {ckpt} (step {s.step}, {s.tokens_seen:,} tokens seen)")
    else:
        if resume:
            say(f"no checkpoint in {run_dir / checkpoint.CHECKPOINTS}; starting a new run")
        if cfg.init_from:
            path = init_checkpoint(cfg)
            checkpoint.load(path, model, None)
            say(f"initialised the weights from {path} (step 0, fresh optimizer and data order)")
    if world.is_main:
        from olmo.data import tokenizer_files
        s.carry = tokenizer_files.for_run(cfg, ckpt if resume else None,
                                          checkpoint.resolve(Path(cfg.init_from)) if cfg.init_from else None)
    return s


def check_shared_run_dir(run_dir: Path, world: World) -> None:
    """Checkpoints are written by all ranks into one directory that rank 0 renames, so with several nodes run_dir
    must be on shared storage. Rank 0 writes a marker; every rank must see it (NFS may lag a few seconds)."""
    import torch.distributed as dist

    marker = run_dir / ".olmo-shared-check"
    nonce = [f"{time.time_ns()}-{random.getrandbits(32)}" if world.is_main else ""]
    if world.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(marker, nonce[0].encode())
    dist.broadcast_object_list(nonce, src=0)
    seen = False
    for _ in range(20):
        seen = marker.is_file() and marker.read_text() == nonce[0]
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


def _check_resumed_config(saved: dict[str, Any], cfg: TrainConfig, say: Any) -> None:
    now = config_to_dict(cfg)
    changed = [f"{sec}.{k}" for sec in ("model", "data", "optim", "parallel") for k in now[sec]
               if saved.get(sec, {}).get(k) != now[sec][k]]
    changed += [k for k in now if not isinstance(now[k], dict) and saved.get(k) != now[k]]
    runtime_only = ("model.attn_backend", "model.fuse_projections", "model.residual_dtype")  # how, not what
    model_changes = [c for c in changed if c.startswith("model.") and c not in runtime_only]
    if model_changes:
        raise ConfigError(f"the checkpoint's model differs from the recipe ({', '.join(model_changes)}); "
                          "resume with the original model settings or start a new run_dir")
    if changed:
        say(f"[yellow]resuming with changed settings: {', '.join(changed)}[/]")


def _trim_metrics(path: Path, keep_until: int) -> None:
    """Drop metrics records past `keep_until` (left by a run that died after its last checkpoint)."""
    if not path.is_file():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= keep_until]
    if len(kept) != len(lines):
        atomic_write_bytes(path, "".join(ln + "\n" for ln in kept).encode())


def train_step(s: Setup, micro_batches: list[torch.Tensor], lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step; returns (mean cross-entropy, grad norm before clipping) as device tensors."""
    for group in s.optimizer.param_groups:
        group["lr"] = lr
    if s.graph is not None:
        assert isinstance(s.optimizer, MasterAdamW) and s.optimizer.lr_override is not None
        s.optimizer.lr_override.fill_(lr)
        try:
            ce, grad_norm = s.graph(*micro_batches)
            return ce.clone(), grad_norm.clone()  # the graph's outputs are overwritten by the next replay
        except CaptureFailed as e:
            s.say(f"[yellow]the step could not be recorded as a CUDA graph ({e}); going on without[/]")
            s.graph = None
            s.optimizer.lr_override = None
    ce, grad_norm = _step_core(s, micro_batches)
    s.optimizer.zero_grad(set_to_none=True)
    return ce, grad_norm


def _step_core(s: Setup, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the micro-batches, clip, optimizer step (gradients are left in place)."""
    n = len(micro_batches)
    ce_sum = torch.zeros((), device=s.device)
    for i, mb in enumerate(micro_batches):
        # Gradients are reduced across ranks in the last micro-batch's backward only (FSDP2/DDP no_sync).
        parallel.grad_sync(s.model, i == n - 1 or s.cfg.parallel.sync_every_micro_batch)
        tokens = mb.to(s.device, non_blocking=True)
        labels = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)
        with torch.autocast(s.device.type, dtype=s.amp) if s.amp else contextlib.nullcontext():
            loss, ce, _ = s.model(tokens, labels=labels)
        (loss / n).backward()
        ce_sum += ce.detach()
    clip = s.cfg.optim.grad_clip or math.inf
    grad_norm = clip_and_step(s.model, s.optimizer, clip)
    # every rank saw the same number of tokens, so the global mean loss is the mean of the ranks' means
    return parallel.all_reduce_sum(ce_sum / n) / s.world.world_size, grad_norm


@torch.no_grad()
def evaluate(s: Setup) -> float | None:
    """Mean cross-entropy over the eval sequences, which are split evenly over the ranks (olmo/data/loader.py), so
    every rank runs the same number of forwards (FSDP2's all-gathers are collective) and the result does not
    depend on the world size. None when there is no eval split."""
    if not s.val:
        return None
    s.model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=s.device)  # (sum of per-sequence mean CE, sequences)
    for mb in s.val:
        tokens = mb.to(s.device)
        labels = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)
        with torch.autocast(s.device.type, dtype=s.amp) if s.amp else contextlib.nullcontext():
            ce = s.model(tokens, labels=labels)[1]
        sums[0] += ce.double() * len(tokens)  # every sequence has seq_len-1 labels: this is the token mean
        sums[1] += len(tokens)
    s.model.train()
    sums = parallel.all_reduce_sum(sums)
    return float(sums[0] / sums[1])


def train(cfg: TrainConfig, resume: bool = False, console: Console | None = None) -> TrainResult:
    """Run (or resume) training; under torchrun, every rank calls this and rank 0 alone speaks."""
    if not world_from_env().is_main:
        console = Console(quiet=True)
    console = console or Console(quiet=True)
    say = console.print
    run_dir = Path(cfg.run_dir)
    created = missing_dirs(run_dir)
    lock = None
    if world_from_env().is_main:  # one lock per job: a multi-node run_dir is one shared folder (lock.py)
        check_output_dir(run_dir, "run_dir")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create run_dir {run_dir}: {e.strerror}") from None
        lock = DirLock(run_dir, "run_dir")
        try:
            lock.acquire()
        except BaseException:
            remove_empty_dirs(created)
            raise
    try:
        result = _train(cfg, resume, say)
        parallel.barrier()  # no rank tears its connections down while another still talks (gloo aborts then)
        return result
    finally:
        try:
            parallel.shutdown()
        finally:
            if lock is not None:
                lock.release()
                remove_empty_dirs(created)  # a run that failed before writing anything leaves no run_dir


def _train(cfg: TrainConfig, resume: bool, say: Any) -> TrainResult:
    s = setup(cfg, resume, say)
    run_dir = Path(cfg.run_dir)
    main = s.world.is_main
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(run_dir / "config.yaml", to_yaml(cfg).encode())
        _trim_metrics(run_dir / "metrics.jsonl", s.step)
    log = MetricsLog(run_dir, config_to_dict(cfg), cfg.wandb_project, cfg.tensorboard, warn=say) if main else None
    stop = cfg.hard_stop or cfg.steps
    tokens_per_step = cfg.global_batch_size * cfg.data.seq_len
    flops_tok = cfg.model.flops_per_token(cfg.data.seq_len)
    peak = peak_flops(torch.cuda.get_device_name(s.device)) if s.device.type == "cuda" and s.amp else None
    n_params = cfg.model.num_params()
    par = cfg.parallel
    where = (f"{s.world.world_size} processes ({par.dp}{', AC ' + par.ac if par.ac != 'none' else ''})"
             if s.world.world_size > 1 else str(s.device))
    precision = "bf16" if parallel.compute_dtype(cfg, s.device) else "fp32"
    precision += ", bf16 weight copies" if isinstance(s.optimizer, MasterAdamW) else ""
    precision += ", CUDA graph" if s.graph is not None else ""
    say(f"[bold]olmo train[/] {n_params / 1e6:,.1f}M parameters on {where} "
        f"({precision}, attention: {cfg.model.attn_backend}), steps {s.step}->{stop}, "
        f"{cfg.global_batch_size} x {cfg.data.seq_len} tokens per step, "
        f"grad accumulation {cfg.grad_accum(s.world.world_size)}")
    result = TrainResult(run_dir, str(s.device), s.step, s.step)
    t_start = time.perf_counter()
    t_window, steps_window, t_first_done = t_start, 0, None
    paused = paused_total = 0.0  # eval and checkpoint time, kept out of tokens/s
    step = s.step
    try:
        while step < stop:
            lr = lr_at(step, cfg.steps, cfg.optim)
            loss_t, gnorm_t = train_step(s, s.loader.next_batch(), lr)
            step += 1
            s.tokens_seen += tokens_per_step
            steps_window += 1
            if t_first_done is None:
                t_first_done = time.perf_counter()
            if step % cfg.log_interval == 0 or step == stop:
                loss, gnorm = loss_t.item(), gnorm_t.item()  # .item() waits for the GPU: time is real below
                if not math.isfinite(loss):
                    raise TrainingFailed(f"the loss became {loss} at step {step}; lower optim.lr or raise "
                                         "optim.warmup_steps, then resume from the last checkpoint with --resume")
                now = time.perf_counter()
                tps = steps_window * tokens_per_step / max(now - t_window - paused, 1e-9)
                t_window, steps_window, paused = now, 0, 0.0
                util = mfu(tps, flops_tok, peak, s.world.world_size)
                result.losses.append(loss)
                if log:
                    log.write({"step": step, "loss": loss, "lr": lr, "grad_norm": gnorm, "tokens": s.tokens_seen,
                               "tokens_per_s": round(tps, 1), "mfu": None if util is None else round(util, 4)})
                eta = (stop - step) * tokens_per_step / max(tps, 1e-9)
                say(f"step {step:>6}/{stop}  loss {loss:.4f}  lr {lr:.2e}  grad norm {gnorm:.3f}  "
                    f"{tps:,.0f} tok/s" + (f"  MFU {util:.1%}" if util is not None else "") + f"  ETA {eta:,.0f}s")
            t_pause = time.perf_counter()
            if (cfg.eval_interval and step % cfg.eval_interval == 0) or step == stop:
                ev = evaluate(s)
                if ev is not None:
                    result.eval_loss = ev
                    if log:
                        log.write({"step": step, "eval_loss": ev, "eval_ppl": math.exp(min(ev, 50.0))})
                    say(f"[cyan]eval[/] step {step}: loss {ev:.4f}, perplexity {math.exp(min(ev, 50.0)):,.2f}")
            if step % cfg.save_interval == 0 or step == stop:
                state = {"tokens_seen": s.tokens_seen, "data_loader": s.loader.state_dict(),
                         "config": config_to_dict(cfg), "world_size": s.world.world_size}
                result.checkpoint = checkpoint.save(run_dir, step, s.model, s.optimizer, state, cfg.keep_last_n,
                                                    extra=s.carry)
                say(f"saved {result.checkpoint}")
            paused += time.perf_counter() - t_pause
            paused_total += time.perf_counter() - t_pause
    except KeyboardInterrupt:
        last = checkpoint.latest(run_dir)
        say(f"[yellow]interrupted at step {step}[/]; " + (f"resume from {last.name} with --resume" if last else
                                                           "no checkpoint was written yet"))
        raise
    finally:
        if log:
            log.close()
    result.step = step
    result.seconds = time.perf_counter() - t_start
    done = step - s.step
    if done > 1 and t_first_done is not None:
        busy = time.perf_counter() - t_first_done - paused_total
        result.tokens_per_s = (done - 1) * tokens_per_step / max(busy, 1e-9)
    elif done == 1:
        result.tokens_per_s = tokens_per_step / max(result.seconds, 1e-9)
    return result


def describe(cfg: TrainConfig) -> dict[str, Any]:
    """A short summary of a config for `olmo train --dry-run`."""
    return {"parameters": cfg.model.num_params(), "non_embedding_parameters": cfg.model.num_params(False),
            "flops_per_token": cfg.model.flops_per_token(cfg.data.seq_len),
            "tokens_per_step": cfg.global_batch_size * cfg.data.seq_len,
            "config": dataclasses.asdict(cfg)}
