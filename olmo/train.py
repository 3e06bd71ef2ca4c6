"""The training loop: one setup pass (olmo/preflight.py's checks and data, then model, optimizer, resume), then a
plain loop of steps, logs, evals, saves.

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
import gc
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
from rich.markup import escape  # paths are data: a "[/x]" in one is not markup

from olmo import checkpoint, parallel
from olmo.config import ConfigError, TrainConfig
from olmo.cuda_graph import CaptureFailed, GraphedStep
from olmo.data.loader import DataLoader
from olmo.fsutil import atomic_write_bytes, check_output_dir, missing_dirs, remove_empty_dirs
from olmo.lock import DirLock
from olmo.metrics import MetricsLog, mfu, peak_flops
from olmo.model import Transformer
from olmo.optim.mixed_precision import MasterAdamW
from olmo.optim.optimizer import build_optimizer, clip_and_step, lr_at
from olmo.parallel import World, autocast_dtype, world_from_env
from olmo.preflight import Checked, check_resumed_config, check_shared_run_dir, preflight
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


def setup(cfg: TrainConfig, resume: bool, say: Any, checked: Checked | None = None) -> Setup:
    """The one setup pass, with run_dir locked: preflight's checks and data (`checked`, or run now when not given
    or when run_dir's checkpoints changed since), then the model, the optimizer and the resumed state."""
    if checked is None or not checked.still_holds(cfg):
        checked = preflight(cfg, resume)
    world, device, ckpt, loader, val = checked.world, checked.device, checked.ckpt, checked.loader, checked.val
    run_dir = Path(cfg.run_dir)
    _seed_everything(cfg.seed)
    mesh = parallel.init_distributed(world, device)
    if world.world_size > 1:
        check_shared_run_dir(run_dir, world)

    if cfg.model.attn_backend == "auto":
        cfg.model.attn_backend = _choose_attention(cfg, world, device, say)
    model = parallel.build_parallel_model(cfg, world, device, mesh, say if world.is_main else None)
    amp = autocast_dtype(cfg, device, world)
    single_gpu = world.world_size == 1 and device.type == "cuda"
    optimizer = build_optimizer(model, cfg.optim, device, copies_dtype=amp if single_gpu else None)
    s = Setup(cfg, world, device, amp, model, optimizer, loader, val, say=say)
    if cfg.cuda_graph and not graph_the_step(s):
        say("[yellow]cuda_graph is on but ignored[/]: it needs one process on a GPU with bf16 "
            "and optim.compute_copies")
    if ckpt and resume:
        check_resumed_config(checkpoint.saved_config(ckpt), cfg, say)
        state = checkpoint.load(ckpt, model, optimizer)
        loader.load_state_dict(state["data_loader"])
        s.step, s.tokens_seen = state["step"], state["tokens_seen"]
        saved_world = state.get("world_size", 1)
        # last: nothing after this may draw random numbers
        if not checkpoint.restore_rng(state, world.rank, world.world_size):
            say(f"resuming on {world.world_size} process(es) from a checkpoint saved on {saved_world}: same global "
                "batches from the same sample index, split over the new ranks (RNG states not restored)")
        say(f"resumed from {escape(str(ckpt))} (step {s.step}, {s.tokens_seen:,} tokens seen)")
    else:
        if resume:
            say(f"no checkpoint in {escape(str(run_dir / checkpoint.CHECKPOINTS))}; starting a new run")
        if checked.init_path:
            path = checked.init_path
            checkpoint.load(path, model, None)
            say(f"initialised the weights from {escape(str(path))} (step 0, fresh optimizer and data order)")
    if world.is_main:
        from olmo.data import tokenizer_files
        s.carry = tokenizer_files.for_run(cfg, ckpt if resume else None,
                                          checkpoint.resolve(Path(cfg.init_from)) if cfg.init_from else None)
    return s


def graph_the_step(s: Setup) -> bool:
    """Make train_step replay the step as one CUDA graph (recorded after 3 eager warm-up steps), when it can: one
    process on a GPU whose optimizer keeps the bf16 copies (the learning rate becomes a tensor the graph reads)."""
    if not isinstance(s.optimizer, MasterAdamW) or s.device.type != "cuda":
        return False
    s.optimizer.lr_override = torch.zeros((), dtype=torch.float32, device=s.device)
    s.graph = GraphedStep(lambda *batches: _step_core(s, list(batches)), s.optimizer.zero_grad, s.device)
    return True


def _record_step(line: str) -> float:
    """The step of one metrics record; infinity (so it is dropped) for a line that is not one, e.g. the torn
    last line of a run that was killed mid-write."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return math.inf
    step = rec.get("step", 0) if isinstance(rec, dict) else None
    return step if isinstance(step, int | float) and not isinstance(step, bool) else math.inf


def _trim_metrics(path: Path, keep_until: int) -> None:
    """Drop metrics records past `keep_until` (left by a run that died after its last checkpoint)."""
    if path.is_symlink() or not path.is_file():
        return  # a link is refused when the metrics log opens it, never read or rewritten through
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    kept = [ln for ln in lines if _record_step(ln) <= keep_until]
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


def train(cfg: TrainConfig, resume: bool = False, console: Console | None = None,
          checked: Checked | None = None) -> TrainResult:
    """Run (or resume) training; under torchrun, every rank calls this and rank 0 alone speaks. `checked`: what
    `preflight` found for this cfg and resume (the CLI runs it before the doctor gate); run here when not given."""
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
        result = _train(cfg, resume, say, checked)
        # The wrapped model (DDP's reducer, FSDP2's hooks and their last pending work objects) sits in reference
        # cycles: free it now, while the process group is alive. Left to interpreter exit, gloo's work objects
        # are torn down after the group and the process can die with SIGABRT after a run that succeeded.
        gc.collect()
        parallel.barrier()  # no rank tears its connections down while another still talks (gloo aborts then)
        return result
    finally:
        try:
            parallel.shutdown()
        finally:
            if lock is not None:
                lock.release()
                remove_empty_dirs(created)  # a run that failed before writing anything leaves no run_dir


def _train(cfg: TrainConfig, resume: bool, say: Any, checked: Checked | None) -> TrainResult:
    s = setup(cfg, resume, say, checked)
    run_dir = Path(cfg.run_dir)
    main = s.world.is_main
    if main:  # run_dir exists: train() made it before taking its lock
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
    precision += ", float8 projections" if cfg.precision == "fp8" else ""
    precision += ", bf16 weight copies" if isinstance(s.optimizer, MasterAdamW) and s.optimizer.copies else ""
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
                say(f"saved {escape(str(result.checkpoint))}")
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
