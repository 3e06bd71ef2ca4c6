"""The training loop: one setup pass (olmo/preflight.py's checks and data, then model, optimizer, resume), then a
plain loop of steps, logs, evals, saves.

    for step in range(start, stop):
        lr = schedule(step); for each micro-batch: forward, loss / n_micro, backward
        clip grads, AdamW step; log; maybe eval; maybe checkpoint

Exact resume: everything a step depends on is either in the checkpoint (weights, AdamW moments, the data
loader's position, the RNG states) or a pure function of the step (the learning rate), so on the CPU a run
stopped at step 10 and resumed gives the same losses, bit for bit, as one that never stopped (tests/trainer).

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from olmo import checkpoint, outputs, parallel, progress, rng_states
from olmo.config import TrainConfig
from olmo.cuda_graph import CaptureFailed, GraphedStep
from olmo.data.loader import ShardLoader
from olmo.errors import TrainingFailed as TrainingFailed  # raised here; the CLI's one error path catches it
from olmo.fsutil import atomic_write_bytes, check_output_dir
from olmo.lock import locked_new_dir
from olmo.metrics import MetricsLog, Throughput, mfu, peak_flops
from olmo.model import Transformer
from olmo.optim.mixed_precision import MasterAdamW
from olmo.optim.optimizer import build_optimizer, clip_and_step, lr_at
from olmo.parallel import World, autocast_dtype, world_from_env
from olmo.preflight import Checked, check_resumed_config, check_shared_run_dir, preflight
from olmo.progress import Advance, Phases
from olmo.recipe import config_to_dict, to_yaml
from olmo.terminal import inert
from olmo_common.atomic import AtomicFile, shared_mode
from olmo_common.bounded.files import read_lines


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
class RunState:
    """Everything a running step reads and changes: what `setup` built, the step reached and the tokens seen."""

    cfg: TrainConfig
    world: World
    device: torch.device
    amp: torch.dtype | None
    model: Transformer  # wrapped by olmo/parallel.py: FSDP2 shards, DDP replica or a plain module
    optimizer: torch.optim.AdamW
    loader: ShardLoader
    val: list[torch.Tensor]
    step: int = 0
    tokens_seen: int = 0
    graph: GraphedStep | None = None  # the step replayed as one CUDA graph (cfg.cuda_graph, one GPU)
    say: Any = print
    carry: dict[str, bytes] = field(default_factory=dict)  # tokenizer files copied into every checkpoint
    phases: Phases = progress.silent  # bars for eval and checkpoint saves (olmo/progress.py)


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def _choose_attention(cfg: TrainConfig, world: World, device: torch.device, say: Any) -> str:
    """Resolve `attn_backend: auto` (olmo/nn/attention_choice.py); rank 0 decides and every rank uses its answer."""
    from olmo.nn.attention_choice import backend_choice_line, choose

    name = None
    if world.rank == 0:
        choice = choose(cfg.model, cfg.micro_batch_size, cfg.data.seq_len, device)
        say(backend_choice_line(choice))
        name = choice.backend
    if world.world_size > 1:
        box = [name]
        torch.distributed.broadcast_object_list(box, src=0)
        name = box[0]
    assert name is not None
    return name


def setup(cfg: TrainConfig, resume: bool, say: Any, checked: Checked | None = None) -> RunState:
    """The one setup pass, with run_dir locked: preflight's checks and data (`checked`, or run now when not given
    or when run_dir's checkpoints changed since), then the model, the optimizer and the resumed state."""
    if checked is None or not checked.still_holds(cfg):
        checked = preflight(cfg, resume)
    _seed_everything(cfg.seed)
    state = _build(cfg, checked, say)
    if cfg.cuda_graph and not graph_the_step(state):
        say("[yellow]cuda_graph is on but ignored[/]: it needs one process on a GPU with bf16 "
            "and optim.compute_copies")
    if checked.ckpt and resume:
        _resume_from(state, checked.ckpt)
    else:
        _start_fresh(state, checked, resume)
    if state.world.is_main:
        state.carry = _tokenizer_files(cfg, checked.ckpt if resume else None)
    return state


def _build(cfg: TrainConfig, checked: Checked, say: Any) -> RunState:
    """The process group, the (wrapped) model on its attention backend, and its optimizer."""
    world, device = checked.world, checked.device
    mesh = parallel.init_distributed(world, device)
    if world.world_size > 1:
        check_shared_run_dir(Path(cfg.run_dir), world)
    if cfg.model.attn_backend == "auto":
        cfg.model.attn_backend = _choose_attention(cfg, world, device, say)
    model = parallel.build_parallel_model(cfg, world, device, mesh, say if world.is_main else None)
    amp = autocast_dtype(cfg, device, world)
    single_gpu = world.world_size == 1 and device.type == "cuda"
    optimizer = build_optimizer(model, cfg.optim, device, copies_dtype=amp if single_gpu else None)
    return RunState(cfg, world, device, amp, model, optimizer, checked.loader, checked.val, say=say)


def _tokenizer_files(cfg: TrainConfig, resumed: Path | None) -> dict[str, bytes]:
    """The tokenizer files every checkpoint of this run carries (olmo/data/tokenizer_files.py)."""
    from olmo.data import tokenizer_files

    return tokenizer_files.for_run(cfg, resumed, checkpoint.resolve(Path(cfg.init_from)) if cfg.init_from else None)


def _resume_from(state: RunState, ckpt: Path) -> None:
    """Weights, AdamW moments, the loader's position, the step and the RNG states of checkpoint `ckpt`."""
    world, say = state.world, state.say
    check_resumed_config(checkpoint.saved_config(ckpt), state.cfg, say)
    saved = checkpoint.load(ckpt, state.model, state.optimizer)
    state.loader.load_state_dict(saved["data_loader"])
    state.step, state.tokens_seen = saved["step"], saved["tokens_seen"]
    saved_world = saved.get("world_size", 1)
    # last: nothing after this may draw random numbers
    if not rng_states.restore(saved, world.rank, world.world_size):
        say(f"resuming on {world.world_size} process(es) from a checkpoint saved on {saved_world}: same global "
            "batches from the same sample index, split over the new ranks (RNG states not restored)")
    say(f"resumed from {inert(str(ckpt))} (step {state.step}, {state.tokens_seen:,} tokens seen)")


def _start_fresh(state: RunState, checked: Checked, resume: bool) -> None:
    """Step 0: random weights, or those of `init_from` (with a fresh optimizer and data order)."""
    if resume:
        state.say(f"no checkpoint in {inert(str(Path(state.cfg.run_dir) / checkpoint.CHECKPOINTS))}; starting a "
                  "new run")
    if checked.init_path:
        checkpoint.load(checked.init_path, state.model, None)
        state.say(f"initialised the weights from {inert(str(checked.init_path))} (step 0, fresh optimizer and data "
                  "order)")


def graph_the_step(state: RunState) -> bool:
    """Make train_step replay the step as one CUDA graph (recorded after 3 eager warm-up steps), when it can: one
    process on a GPU whose optimizer keeps the bf16 copies (the learning rate becomes a tensor the graph reads)."""
    if not isinstance(state.optimizer, MasterAdamW) or state.device.type != "cuda":
        return False
    state.optimizer.lr_override = torch.zeros((), dtype=torch.float32, device=state.device)
    state.graph = GraphedStep(lambda *batches: forward_backward_step(state, list(batches)),
                              state.optimizer.zero_grad, state.device)
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
    """Drop metrics records past `keep_until` (left by a run that died after its last checkpoint). Streamed, in
    two passes (is anything to drop? then copy the rest), so a metrics log of any size costs a line of memory; a
    line longer than any record (bounded.files CAPS "metrics line") is not one and is dropped."""
    if path.is_symlink() or not path.is_file():
        return  # a link is refused when the metrics log opens it, never read or rewritten through

    def records() -> Iterator[tuple[bytes, float]]:
        for line in read_lines(path, "metrics line", follow=False):
            if line.strip():
                yield line, _record_step(line.decode("utf-8", "replace"))

    if all(step <= keep_until for _, step in records()):
        return

    with AtomicFile(path, shared_mode()) as f:  # a crash mid-way leaves the old log, never half of it
        for line, step in records():
            if step <= keep_until:
                f.write(line.rstrip(b"\r\n") + b"\n")


def train_step(state: RunState, micro_batches: list[torch.Tensor], lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step; returns (mean cross-entropy, grad norm before clipping) as device tensors."""
    for group in state.optimizer.param_groups:
        group["lr"] = lr
    if state.graph is not None:
        assert isinstance(state.optimizer, MasterAdamW) and state.optimizer.lr_override is not None
        state.optimizer.lr_override.fill_(lr)
        try:
            ce, grad_norm = state.graph(*micro_batches)
            return ce.clone(), grad_norm.clone()  # the graph's outputs are overwritten by the next replay
        except CaptureFailed as e:
            state.say(f"[yellow]the step could not be recorded as a CUDA graph ({inert(e)}); going on without[/]")
            state.graph = None
            state.optimizer.lr_override = None
    ce, grad_norm = forward_backward_step(state, micro_batches)
    state.optimizer.zero_grad(set_to_none=True)
    return ce, grad_norm


def next_token_labels(tokens: torch.Tensor) -> torch.Tensor:
    """The label of each position is the next token; the last position has none (-100, ignored by the loss)."""
    return torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)


def _autocast(state: RunState) -> contextlib.AbstractContextManager[Any]:
    """The forward's autocast region (bf16 on a GPU), or nothing in fp32."""
    return torch.autocast(state.device.type, dtype=state.amp) if state.amp else contextlib.nullcontext()


def forward_backward_step(state: RunState, micro_batches: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the micro-batches, clip, optimizer step (gradients are left in place)."""
    n = len(micro_batches)
    ce_sum = torch.zeros((), device=state.device)
    for i, mb in enumerate(micro_batches):
        # Gradients are reduced across ranks in the last micro-batch's backward only (FSDP2/DDP no_sync).
        parallel.grad_sync(state.model, i == n - 1 or state.cfg.parallel.sync_every_micro_batch)
        tokens = mb.to(state.device, non_blocking=True)
        with _autocast(state):
            loss, ce, _ = state.model(tokens, labels=next_token_labels(tokens))
        (loss / n).backward()
        ce_sum += ce.detach()
    clip = state.cfg.optim.grad_clip or math.inf
    grad_norm = clip_and_step(state.model, state.optimizer, clip)
    # every rank saw the same number of tokens, so the global mean loss is the mean of the ranks' means
    return parallel.all_reduce_sum(ce_sum / n) / state.world.world_size, grad_norm


@torch.no_grad()
def evaluate(state: RunState, advance: Advance | None = None) -> float | None:
    """Mean cross-entropy over the eval sequences, which are split evenly over the ranks (olmo/data/loader.py), so
    every rank runs the same number of forwards (FSDP2's all-gathers are collective) and the result does not
    depend on the world size. None when there is no eval split."""
    if not state.val:
        return None
    state.model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=state.device)  # (sum of per-sequence mean CE, sequences)
    for mb in state.val:
        tokens = mb.to(state.device)
        with _autocast(state):
            ce = state.model(tokens, labels=next_token_labels(tokens))[1]
        sums[0] += ce.double() * len(tokens)  # every sequence has seq_len-1 labels: this is the token mean
        sums[1] += len(tokens)
        if advance is not None:
            advance(1)
    state.model.train()
    sums = parallel.all_reduce_sum(sums)
    return float(sums[0] / sums[1])


def _start_run_dir(run_dir: Path, cfg: TrainConfig, step: int) -> None:
    """Mark run_dir as olmo train's (preflight checked that it is, or holds nothing a run replaces), write the
    resolved config and cut metrics.jsonl back to `step` (a resume from an earlier checkpoint logs them again)."""
    if outputs.marker_of(run_dir) is None:
        outputs.write_marker(run_dir, "train")
    atomic_write_bytes(run_dir / "config.yaml", to_yaml(cfg).encode())
    _trim_metrics(run_dir / "metrics.jsonl", step)


def _evaluate_shown(state: RunState, step: int, tokens_per_s: float) -> float | None:
    """`evaluate`, with a bar by batches and, when it is predicted to be long, a start line in the log."""
    if not state.val:
        return None
    cfg, n_batches = state.cfg, len(state.val)
    seconds = progress.predicted_eval_seconds(n_batches, cfg.micro_batch_size * cfg.data.seq_len,
                                              state.world.world_size, tokens_per_s or 0.0)
    if seconds is not None and seconds > progress.NOTE_SECONDS:
        state.say(f"[cyan]eval[/] step {step}: {n_batches * state.world.world_size} batches (about {seconds:,.0f}s)")
    with state.phases("eval", n_batches) as advance:
        return evaluate(state, advance)


def _save_shown(state: RunState, run_dir: Path, step: int, extra: dict[str, Any]) -> Path:
    """`checkpoint.save`, with a bar by bytes on disk and, for a large checkpoint, a start line in the log."""
    total = sum(t.numel() * t.element_size() for group in (state.model.state_dict(), state.optimizer.state_dict())
                for t in checkpoint.tensors(group))
    final = run_dir / checkpoint.CHECKPOINTS / checkpoint.step_dir_name(step)
    if total > progress.NOTE_BYTES:
        state.say(f"saving checkpoint step {step} ({total / 1e9:,.1f} GB) to {inert(str(final))}")
    with state.phases("saving", total) as advance, \
            progress.watch_folder((final.with_name(f"{final.name}-tmp"), final), advance):
        return checkpoint.save(run_dir, step, state.model, state.optimizer, extra, state.cfg.keep_last_n,
                               extra=state.carry)


def train(cfg: TrainConfig, resume: bool = False, console: Console | None = None,
          checked: Checked | None = None, phases: Phases | None = None) -> TrainResult:
    """Run (or resume) training; under torchrun, every rank calls this and rank 0 alone speaks. `checked`: what
    `preflight` found for this cfg and resume (the CLI runs it before the doctor gate); run here when not given."""
    main = world_from_env().is_main
    console = console if main and console else Console(quiet=True)
    run_dir = Path(cfg.run_dir)
    if main:  # one lock per job: a multi-node run_dir is one shared folder (lock.py)
        check_output_dir(run_dir, "run_dir")
    # a run that failed before writing anything leaves no run_dir (the lock removes the folders it made when empty)
    with locked_new_dir(run_dir, "run_dir") if main else contextlib.nullcontext():
        try:
            result = _run_loop(cfg, resume, console.print, checked, phases if main and phases else progress.silent)
            # The wrapped model (DDP's reducer, FSDP2's hooks and their last pending work objects) sits in
            # reference cycles: free it now, while the process group is alive. Left to interpreter exit, gloo's
            # work objects are torn down after the group and the process can die with SIGABRT after a run that
            # succeeded.
            gc.collect()
            parallel.barrier()  # no rank tears its connections down while another still talks (gloo aborts then)
            return result
        finally:
            parallel.shutdown()


def _run_loop(cfg: TrainConfig, resume: bool, say: Any, checked: Checked | None, phases: Phases) -> TrainResult:
    """Set up, then step until `hard_stop` or `steps`; logs, evals and saves on their intervals and at the end."""
    state = setup(cfg, resume, say, checked)
    state.phases = phases
    run_dir = Path(cfg.run_dir)
    main = state.world.is_main
    if main:  # run_dir exists: train() made it before taking its lock
        _start_run_dir(run_dir, cfg, state.step)
    log = (MetricsLog(run_dir, config_to_dict(cfg), cfg.wandb_project, cfg.tensorboard, warn=say, resume=resume)
           if main else None)
    stop = cfg.hard_stop or cfg.steps
    say(_banner(state, stop))
    loop = _Loop(state, log, TrainResult(run_dir, str(state.device), state.step, state.step), stop)
    try:
        loop.run()
    finally:
        if log:
            log.close()
    result = loop.result
    result.step = loop.step
    result.seconds, result.tokens_per_s = loop.clock.run_totals(loop.step - state.step)
    return result


def _banner(state: RunState, stop: int) -> str:
    """The run's first line: its size, where and how it trains, and its steps."""
    cfg, world = state.cfg, state.world
    par = cfg.parallel
    where = (f"{world.world_size} processes ({par.dp}{', AC ' + par.ac if par.ac != 'none' else ''})"
             if world.world_size > 1 else str(state.device))
    return (f"[bold]olmo train[/] {cfg.model.num_params() / 1e6:,.1f}M parameters on {where} "
            f"({_precision_words(state)}, attention: {cfg.model.attn_backend}), steps {state.step}->{stop}, "
            f"{cfg.global_batch_size} x {cfg.data.seq_len} tokens per step, "
            f"grad accumulation {cfg.grad_accum(world.world_size)}")


def _precision_words(state: RunState) -> str:
    """How the run computes, for its first line: e.g. "bf16, bf16 weight copies, CUDA graph"."""
    cfg = state.cfg
    words = ["bf16" if parallel.compute_dtype(cfg, state.device) else "fp32"]
    optional = (("float8 projections", cfg.precision == "fp8"),
                ("bf16 weight copies", isinstance(state.optimizer, MasterAdamW) and bool(state.optimizer.copies)),
                ("CUDA graph", state.graph is not None))
    return ", ".join(words + [word for word, on in optional if on])


class _Loop:
    """The steps of one run from `state.step` to `stop`, with what their log lines need: the metrics log, the
    result being filled in, the throughput clock (started when the loop is made) and the GPU's peak (for MFU)."""

    def __init__(self, state: RunState, log: MetricsLog | None, result: TrainResult, stop: int):
        self.state, self.log, self.result, self.stop = state, log, result, stop
        self.step = state.step
        self.flops_per_token = state.cfg.flops_per_token()
        self.peak = (peak_flops(torch.cuda.get_device_name(state.device))
                     if state.device.type == "cuda" and state.amp else None)
        self.clock = Throughput(state.cfg.tokens_per_step)

    def run(self) -> None:
        state, cfg = self.state, self.state.cfg
        try:
            while self.step < self.stop:
                lr = lr_at(self.step, cfg.steps, cfg.optim)
                loss, grad_norm = train_step(state, state.loader.next_batch(), lr)
                self.step += 1
                state.tokens_seen += cfg.tokens_per_step
                self.clock.step_done()
                if self.step % cfg.log_interval == 0 or self.step == self.stop:
                    self._log_step(lr, loss, grad_norm)
                with self.clock.paused():  # eval and checkpoint time, kept out of tokens/s
                    self._eval_and_save()
        except KeyboardInterrupt:
            last = checkpoint.latest(Path(cfg.run_dir))
            state.say(f"[yellow]interrupted at step {self.step}[/]; "
                      + (f"resume from {last.name} with --resume" if last else "no checkpoint was written yet"))
            raise

    def _log_step(self, lr: float, loss_t: torch.Tensor, grad_norm_t: torch.Tensor) -> None:
        step, state = self.step, self.state
        loss, grad_norm = loss_t.item(), grad_norm_t.item()  # .item() waits for the GPU: time is real below
        if not math.isfinite(loss):
            raise TrainingFailed(f"the loss became {loss} at step {step}; lower optim.lr or raise "
                                 "optim.warmup_steps, then resume from the last checkpoint with --resume")
        tokens_per_s = self.clock.close_window()
        util = mfu(tokens_per_s, self.flops_per_token, self.peak, state.world.world_size)
        self.result.losses.append(loss)
        if self.log:
            self.log.write({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                            "tokens": state.tokens_seen, "tokens_per_s": round(tokens_per_s, 1),
                            "mfu": None if util is None else round(util, 4)})
        eta = self.clock.eta(self.stop - step)
        state.say(f"step {step:>6}/{self.stop}  loss {loss:.4f}  lr {lr:.2e}  grad norm {grad_norm:.3f}  "
                  f"{tokens_per_s:,.0f} tok/s" + (f"  MFU {util:.1%}" if util is not None else "")
                  + f"  ETA {eta:,.0f}s")

    def _eval_and_save(self) -> None:
        step, cfg = self.step, self.state.cfg
        if (cfg.eval_interval and step % cfg.eval_interval == 0) or step == self.stop:
            self._eval()
        if step % cfg.save_interval == 0 or step == self.stop:
            self._save()

    def _eval(self) -> None:
        step, state = self.step, self.state
        eval_loss = _evaluate_shown(state, step, self.clock.last_rate)
        if eval_loss is None:
            return
        self.result.eval_loss = eval_loss
        perplexity = math.exp(min(eval_loss, 50.0))
        if self.log:
            self.log.write({"step": step, "eval_loss": eval_loss, "eval_ppl": perplexity})
        state.say(f"[cyan]eval[/] step {step}: loss {eval_loss:.4f}, perplexity {perplexity:,.2f}")

    def _save(self) -> None:
        state = self.state
        extra = {"tokens_seen": state.tokens_seen, "data_loader": state.loader.state_dict(),
                 "config": config_to_dict(state.cfg), "world_size": state.world.world_size}
        self.result.checkpoint = _save_shown(state, Path(state.cfg.run_dir), self.step, extra)
        state.say(f"saved {inert(str(self.result.checkpoint))}")


def dry_run_summary(cfg: TrainConfig) -> dict[str, Any]:
    """A short summary of a config for `olmo train --dry-run`."""
    return {"parameters": cfg.model.num_params(), "non_embedding_parameters": cfg.model.num_params(False),
            "flops_per_token": cfg.flops_per_token(), "tokens_per_step": cfg.tokens_per_step,
            "config": dataclasses.asdict(cfg)}
