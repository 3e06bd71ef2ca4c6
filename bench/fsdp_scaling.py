"""Benchmark: FSDP2 data-parallel scaling of olmo's training step, N GPUs against one, on the same per-GPU batch.

Both runs use the trainer's own code: `olmo.parallel.build_parallel_model` (the same wrapping order as
`olmo train`), `olmo.optim.optimizer.build_optimizer` (fused AdamW, fp32 master weights) and `olmo.train.train_step`
(the loop's step: forward, loss, backward with gradient sync, clip, AdamW). Shape: OLMo-core `olmo2_1B` (d_model 2048,
18 layers, 16 heads, MLP 8192, vocab 100352), 4 x 4096 random tokens per GPU per step, bf16 compute (autocast on
one GPU; FSDP2 bf16 params with fp32 gradient reduction on N), or `--precision fp8`. Anchor: the one-GPU run,
measured in the same command, by default in the fastest one-GPU configuration of ours (bf16 weight copies kept by
the optimizer and the step as one CUDA graph, which exist only in one process; `--one-gpu plain` runs the N-GPU
code instead). Target: N-GPU tokens/s >= 1.9x the one-GPU tokens/s on 2 GPUs (0.95 scaling efficiency).

    python bench/fsdp_scaling.py                 # world size 1, then all visible GPUs through torchrun
    python bench/fsdp_scaling.py --gpus 2 --steps 20 --compile
    python bench/fsdp_scaling.py --gpus 2 --compile --variants 'reshard=1;reshard=0;dp=ddp'
    python bench/fsdp_scaling.py --gpus 2 --compile --precision fp8 --attn flash_attn_3   # the fastest settings
    python bench/fsdp_scaling.py --check         # correctness: 1 GPU vs 2 GPUs (FSDP2, DDP) losses, small model

Run from the repo root after `python3 -m pip install -e . --no-deps --no-build-isolation`. Each measurement is a
fresh process (one through `torchrun --standalone`), which writes its numbers as JSON for this driver to print.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------- worker side
def worker(a: argparse.Namespace) -> None:
    """One measurement in this process (a torchrun rank or the single GPU), then a clean exit: the model and its
    optimizer are freed (and collected) while the process group is alive, as olmo.train does, else gloo can abort
    the process at exit."""
    from olmo import parallel

    _measure_here(a)
    gc.collect()
    parallel.barrier()
    parallel.shutdown()


def _measure_here(a: argparse.Namespace) -> None:
    """Timed train_step calls; rank 0 writes the numbers to a.out."""
    import torch

    from olmo import parallel
    from olmo.config import ModelConfig, TrainConfig
    from olmo.optim.optimizer import build_optimizer
    from olmo.train import RunState, graph_the_step, train_step

    world = parallel.world_from_env()
    cuda = not a.cpu_smoke
    cfg = TrainConfig(model=ModelConfig.olmo2_1b() if cuda else ModelConfig.tiny(), micro_batch_size=a.batch,
                      global_batch_size=a.batch * world.world_size, device="cuda" if cuda else "cpu",
                      precision=a.precision if cuda else "fp32", compile=a.compile, steps=a.warmup + a.steps)
    cfg.model.attn_backend = a.attn
    cfg.data.seq_len = a.seq
    cfg.model.max_seq_len = max(cfg.model.max_seq_len, a.seq)
    cfg.parallel.ac = a.ac
    cfg.parallel.reshard_after_forward = a.reshard == 1
    cfg.parallel.dp = a.dp
    device = parallel.resolve_device(cfg.device, world)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.set_device(device)
    mesh = parallel.init_distributed(world, device)
    model = parallel.build_parallel_model(cfg, world, device, mesh)
    amp = parallel.autocast_dtype(cfg, device, world)
    # --one-gpu fastest: the one-GPU anchor as `olmo train` runs it fastest there (bf16 weight copies kept by the
    # optimizer, the step as one CUDA graph); --one-gpu plain: the same code as the N-GPU run
    fastest = world.world_size == 1 and cuda and a.one_gpu == "fastest"
    opt = build_optimizer(model, cfg.optim, device, copies_dtype=amp if fastest else None)
    state = RunState(cfg, world, device, amp, model, opt, None, [])  # type: ignore[arg-type]
    if fastest and not graph_the_step(state):
        sys.exit("fsdp_scaling: the one-GPU step could not be set up as a CUDA graph")
    gen = torch.Generator().manual_seed(1000 + world.rank)  # a different random batch on every rank
    batches = [[torch.randint(0, cfg.model.vocab_size, (a.batch, a.seq), generator=gen)] for _ in range(4)]
    for i in range(a.warmup):
        train_step(state, batches[i % 4], 1e-4)
    sync()
    parallel.barrier()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss, _ = train_step(state, batches[i % 4], 1e-4)
    loss.item()  # waits for the last step
    sync()
    seconds = time.perf_counter() - t0
    tokens = a.steps * a.batch * a.seq * world.world_size
    if world.is_main:
        Path(a.out).write_text(json.dumps({
            "world_size": world.world_size, "tokens_per_s": tokens / seconds, "step_s": seconds / a.steps,
            "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if cuda else 0.0, "loss": float(loss),
            "gpu": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__}))


# ---------------------------------------------------------------------------------------------- driver side
def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}".rstrip(":"))
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # the lent H200 box needs NVLink SHARP off
    env.setdefault("OMP_NUM_THREADS", "4")
    return env


def measure(a: argparse.Namespace, gpus: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        args = ["--worker", "--out", f.name, "--steps", str(a.steps), "--warmup", str(a.warmup),
                "--batch", str(a.batch), "--seq", str(a.seq), "--ac", a.ac, "--reshard", str(a.reshard),
                "--dp", a.dp, "--precision", a.precision, "--attn", a.attn, "--one-gpu", a.one_gpu] \
            + (["--compile"] if a.compile else []) + (["--cpu-smoke"] if a.cpu_smoke else [])
        launcher = [sys.executable] if gpus == 1 else \
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}"]
        t0 = time.perf_counter()
        proc = subprocess.run([*launcher, str(Path(__file__).resolve()), *args], env=_env(), cwd=ROOT)
        if proc.returncode:
            sys.exit(f"fsdp_scaling: the {gpus}-GPU run failed (exit {proc.returncode})")
        result: dict[str, float] = json.loads(Path(f.name).read_text())
        result["wall_s"] = time.perf_counter() - t0
        return result


def bench(a: argparse.Namespace) -> int:
    import torch

    gpus = a.gpus or torch.cuda.device_count()
    a.variants = a.variants or f"reshard={a.reshard},dp={a.dp}"
    if a.cpu_smoke:  # the driver, the workers and torchrun end to end on this CPU (gloo), tiny model
        gpus, a.steps, a.warmup, a.batch, a.seq = 2, 2, 1, 2, 128
    elif gpus < 2:
        sys.exit(f"fsdp_scaling: needs at least 2 GPUs (found {torch.cuda.device_count()})")
    one = measure(a, 1)
    variants = [dict(kv.split("=", 1) for kv in v.split(",") if "=" in kv) for v in a.variants.split(";")]
    runs = []
    for v in variants:  # the same one-GPU anchor for every parallel variant
        va = argparse.Namespace(**{**vars(a), "reshard": int(v.get("reshard", a.reshard)), "dp": v.get("dp", a.dp)})
        runs.append((va, measure(va, gpus)))
    shape = "tiny model (--cpu-smoke), fp32" if a.cpu_smoke else \
        f"olmo2_1B shape, {a.precision}, attention {a.attn}, one-GPU anchor {a.one_gpu}"
    print(f"\n{shape}, {a.batch} x {a.seq} tokens per GPU per step, {a.steps} timed steps after "
          f"{a.warmup} warm-up, compile={a.compile}, AC={a.ac}; {one['gpu']}, torch {one['torch']}")
    print(f"  {'1 GPU (one process)':<44} {one['tokens_per_s']:>10,.0f} tok/s  {one['step_s'] * 1e3:7.1f} ms/step  "
          f"peak {one['peak_gb']:5.1f} GB/GPU  (process wall {one['wall_s']:.0f} s)")
    target = a.target_per_gpu * gpus
    best = 0.0
    for va, r in runs:
        ratio = r["tokens_per_s"] / one["tokens_per_s"]
        best = max(best, ratio) if va.dp == "fsdp" else best
        label = f"{r['world_size']} GPUs (torchrun, {va.dp.upper()}{', reshard' if va.reshard else ', no reshard'})"
        if va.dp == "ddp":
            label = f"{r['world_size']} GPUs (torchrun, DDP)"
        print(f"  {label:<44} {r['tokens_per_s']:>10,.0f} tok/s  {r['step_s'] * 1e3:7.1f} ms/step  "
              f"peak {r['peak_gb']:5.1f} GB/GPU  (process wall {r['wall_s']:.0f} s)  {ratio:.3f}x")
    verdict = "PASS" if best >= target else "FAIL"
    print(f"  scaling (best FSDP2 variant): {best:.3f}x on {gpus} GPUs ({best / gpus:.1%} efficiency); "
          f"target >= {target:.2f}x: {verdict}")
    return 0 if best >= target else 1


def check(a: argparse.Namespace) -> int:
    """1 GPU vs 2 GPUs through the real `olmo train` on the bundled corpus: losses of the first 3 steps.
    fp32: <= 1e-4 (summation order only). bf16: FSDP2 keeps bf16 params (the residual stream is bf16) where one
    GPU autocasts over fp32 weights, so step 1 may differ by ~1e-3 (bound 2e-2); DDP autocasts too (1e-3)."""
    from olmo.config import DataConfig, ModelConfig, OptimConfig, TrainConfig
    from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
    from olmo.data.prepare import find_inputs, load_tokenizer, prepare
    from olmo.recipe import to_yaml

    failed = 0
    with tempfile.TemporaryDirectory(prefix="olmo-fsdp-check-") as tmp:
        data = Path(tmp) / "data"
        prepare(find_inputs([CORPUS_PATH]), data, load_tokenizer(TOKENIZER_PATH), shard_tokens=1 << 20)

        def run(name: str, gpus: int, precision: str, dp: str) -> list[float]:
            cfg = TrainConfig(model=ModelConfig.olmo2_like(256, 4, 4, vocab_size=768, max_seq_len=256),
                              data=DataConfig(paths=[str(data)], seq_len=256), optim=OptimConfig(warmup_steps=2),
                              run_dir=str(Path(tmp) / name), steps=3, global_batch_size=16, micro_batch_size=4,
                              precision=precision, log_interval=1, save_interval=3)
            cfg.parallel.dp = dp
            recipe = Path(tmp) / f"{name}.yaml"
            recipe.write_text(to_yaml(cfg))
            launcher = [sys.executable] if gpus == 1 else \
                [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}"]
            cmd = [*launcher, "-m", "olmo", "train", str(recipe), "--skip-doctor"]
            proc = subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
            lines = (Path(tmp) / name / "metrics.jsonl").read_text().splitlines()
            return [r["loss"] for r in map(json.loads, lines) if "loss" in r]

        for precision, bounds in (("fp32", {"fsdp": 1e-4, "ddp": 1e-4}), ("bf16", {"fsdp": 2e-2, "ddp": 1e-3})):
            ref = run(f"one-{precision}", 1, precision, "fsdp")
            for dp, bound in bounds.items():
                got = run(f"{dp}-{precision}", 2, precision, dp)
                diff = abs(got[0] - ref[0])
                ok = diff <= bound and len(got) == 3
                failed += not ok
                print(f"  {precision} {dp:4}: 1 GPU {['%.5f' % x for x in ref]}  2 GPUs {['%.5f' % x for x in got]}  "
                      f"step-1 diff {diff:.2e} (bound {bound:g}) {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=0, help="world size of the parallel run (default: all visible)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation, allocator, NCCL setup)")
    p.add_argument("--batch", type=int, default=4, help="sequences per GPU per step")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--compile", action="store_true", help="torch.compile each block (cfg.compile) in both runs")
    p.add_argument("--ac", default="none", choices=["none", "full", "selective"])
    p.add_argument("--reshard", type=int, default=1, choices=[0, 1],
                   help="FSDP2 reshard_after_forward (1: ZeRO-3, the default; 0: keep gathered params for backward)")
    p.add_argument("--dp", default="fsdp", choices=["fsdp", "ddp"], help="data parallelism of the N-GPU run")
    p.add_argument("--variants", default="",
                   help="';'-separated N-GPU variants against one 1-GPU run: 'reshard=1;reshard=0;dp=ddp'")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp8"], help="both runs (fp8: float8 projections)")
    p.add_argument("--attn", default="sdpa", help="attention backend of both runs (sdpa, flash_attn_3, ...)")
    p.add_argument("--one-gpu", default="fastest", choices=["fastest", "plain"],
                   help="the anchor: fastest = bf16 weight copies + the step as a CUDA graph, as `olmo train` on one "
                   "GPU (needs --compile to be the fastest); plain = the N-GPU run's code in one process")
    p.add_argument("--target-per-gpu", type=float, default=0.95, help="exit 1 below this scaling per GPU")
    p.add_argument("--check", action="store_true", help="correctness instead of speed: 1 vs 2 GPU losses")
    p.add_argument("--cpu-smoke", action="store_true", help="run the whole harness on the CPU with a tiny model")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a)
        return 0
    return check(a) if a.check else bench(a)


if __name__ == "__main__":
    sys.exit(main())
