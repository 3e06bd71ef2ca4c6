"""OLMo 3 7B shape at speed (issue 17): ours with every attention backend against OLMo-core 3.0.0, one command.

    python3 bench/olmo3_throughput.py one [--layers 8]   # (a) one H200: the first N layers, batch 1 x 8192
    python3 bench/olmo3_throughput.py fsdp2 [--gpus 2]   # (b) 2x H200 (nvidia-h200-x2): FSDP2, all 32 layers
    python3 bench/olmo3_throughput.py lengths [--layers 8 --seqs 8192,16384,32768,65536]   # (c) cost vs length

Shape: OLMo-core's olmo3_7B (d_model 4096, 32 heads, MLP 11008, vocab 100352, sliding window 4096 on 3 of every 4
layers, the last layer full), sequences of 8192, random tokens, bf16 compute with fp32 master weights, compiled
blocks, fused AdamW. Tokens/s are medians of the timed steps; MFU = tokens/s x FLOPs per token (OLMo-core's
count: 6 x non-embedding params + attention over the attended length, windows included) / 989 TFLOP/s; peak
memory per GPU.

(a) runs bench/train_throughput.py --model olmo3_7b: each implementation in its own process; ours with the
trainer's step (bf16 weight copies, Triton AdamW, the step as a CUDA graph) and each attention backend
(flex, i.e. what `auto` gives with nothing built; flash_attn; flash_attn_3), OLMo-core with flash_2 (its
`olmo3_7B` default) and flash_3. Ratios are against OLMo-core flash_2.
(b) one torchrun per variant: ours (olmo.parallel FSDP2 wrapping and olmo.train.train_step, parallel.ac auto,
attention flex or --attn, precision bf16 or fp8) and OLMo-core (its apply_fp8 when fp8=1, apply_compile, its
activation checkpointing mode, apply_fsdp, as its trainer wraps the model); by default ours in fp8 and bf16,
OLMo-core without checkpointing (its best setting that fits at this size) in bf16 and with its own float8;
batch 1 x 8192 per GPU. `ac=budget` (OLMo-core's memory budget 0.5) and `ac=full` are there for smaller GPUs.
(c) one H200, batch 1 x L for each L of --seqs: ours first with `parallel.ac: auto` (it picks the checkpointed
blocks for that length from the GPU's memory), then OLMo-core with the same blocks checkpointed (its
selected_modules), i.e. equal settings; when that does not fit OLMo-core (its loss materialises the whole
logits: 12 GiB in bf16 at 64K tokens, then fp32 for the cross-entropy), its fallbacks are tried in order
(--core-fallbacks: its compile-native `budget` recompute, then every block) and the row says which one ran.
--steps are the timed steps, after --warmup. Tokens/s, peak memory and the ratio per length.
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
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VOCAB, TOKENS_VOCAB, PEAK_TFLOPS = 100352, 100278, 989e12
ONE_IMPLS = ("olmo-core-compile:attn=flash_2;ours:attn=flex;ours:attn=flash_attn_3;ours:attn=flash_attn;"
             "olmo-core-compile:attn=flash_3")
FSDP_VARIANTS = "ours:ac=auto,precision=fp8;ours:ac=auto;olmo-core:ac=none;olmo-core:ac=none,fp8=1"


def _env() -> dict[str, str]:
    path = [str(HERE / "stubs"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on the lent multi-GPU machines
    env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    return env


def one_gpu(a: argparse.Namespace) -> int:
    argv = [sys.executable, str(HERE / "train_throughput.py"), "--model", "olmo3_7b", "--layers", str(a.layers),
            "--batch", "1", "--seq", "8192", "--steps", str(a.steps), "--warmup", str(a.warmup),
            "--impls", a.impls, "--anchor", a.impls.split(";")[0]]
    if a.out:
        argv += ["--out", a.out]
    return subprocess.run(argv, env=_env(), cwd=ROOT).returncode


# ------------------------------------------------------------------------------------ (b): FSDP2 workers
def _ours_worker(a: argparse.Namespace, opts: dict[str, str]) -> dict[str, float]:
    import torch

    from olmo import parallel
    from olmo.config import ModelConfig, TrainConfig
    from olmo.optim.optimizer import build_optimizer
    from olmo.train import RunState, train_step

    world = parallel.world_from_env()
    model_cfg = ModelConfig.olmo3_7b()
    model_cfg.vocab_size, model_cfg.attn_backend = VOCAB, opts.get("attn", a.attn)
    cfg = TrainConfig(model=model_cfg, micro_batch_size=1, global_batch_size=world.world_size, device="cuda",
                      precision="bf16", compile=True, steps=a.warmup + a.steps)
    cfg.data.seq_len = 8192
    cfg.precision = opts.get("precision", "bf16")
    cfg.parallel.ac = opts.get("ac", "auto")
    cfg.parallel.reshard_after_forward = opts.get("reshard", "1") == "1"
    device = parallel.resolve_device(cfg.device, world)
    torch.cuda.set_device(device)
    mesh = parallel.init_distributed(world, device)
    model = parallel.build_parallel_model(cfg, world, device, mesh, say=print if world.is_main else None)
    opt = build_optimizer(model, cfg.optim, device)
    state = RunState(cfg, world, device, parallel.autocast_dtype(cfg, device, world), model, opt, None, [])  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(1000 + world.rank)

    def step() -> torch.Tensor:
        return train_step(state, [torch.randint(0, TOKENS_VOCAB, (1, 8192), generator=gen)], 1e-4)[0]

    return {**_timed(step, a, device), "flops_per_token": model_cfg.flops_per_token(8192)}


def _olmo_core_worker(a: argparse.Namespace, opts: dict[str, str]) -> dict[str, float]:
    import torch
    import torch.distributed as dist
    from olmo_core.nn.attention import AttentionBackendName
    from olmo_core.nn.transformer import TransformerActivationCheckpointingMode, TransformerConfig
    from torch.distributed.device_mesh import init_device_mesh

    from olmo.config import ModelConfig

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    mesh = init_device_mesh("cuda", (world,))
    cfg = TransformerConfig.olmo3_7B(vocab_size=VOCAB, attn_backend=AttentionBackendName(opts.get("attn", "flash_2")))
    model = cfg.build(init_device="meta")
    if opts.get("fp8") == "1":  # its own float8 option (torchao Float8Linear on all but the LM head), applied first
        from olmo_core.float8 import Float8Config

        model.apply_fp8(Float8Config(enabled=True))
    ac = opts.get("ac", "none")
    if ac == "full":
        model.apply_activation_checkpointing(TransformerActivationCheckpointingMode.full)
    elif ac == "budget":
        model.apply_activation_checkpointing(TransformerActivationCheckpointingMode.budget,
                                             activation_memory_budget=float(opts.get("budget", "0.5")))
    model.apply_compile()
    model.apply_fsdp(dp_mesh=mesh, param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model.init_weights(max_seq_len=8192, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator().manual_seed(1000 + rank)

    def step() -> torch.Tensor:
        x = torch.randint(0, TOKENS_VOCAB, (1, 8192), generator=gen).to(device)
        out = model(x, labels=x)
        loss = out.loss if hasattr(out, "loss") else out
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    res = _timed(step, a, device)
    ours_cfg = ModelConfig.olmo3_7b()
    ours_cfg.vocab_size = VOCAB
    dist.destroy_process_group()
    return {**res, "flops_per_token": ours_cfg.flops_per_token(8192)}


def _timed(step: Any, a: argparse.Namespace, device: Any) -> dict[str, float]:
    import torch

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        float(loss)
        times.append(time.perf_counter() - t0)
    dt = sorted(times)[len(times) // 2]
    return {"step_s": dt, "tokens_per_s_per_gpu": 8192 / dt,
            "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9, "loss": float(loss)}


def worker(a: argparse.Namespace) -> None:
    impl, _, spec = a.variant.partition(":")
    opts = dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)
    res = (_ours_worker if impl == "ours" else _olmo_core_worker)(a, opts)
    if impl == "ours":  # the model is freed with the worker's frame: collect it while the group is alive, as
        from olmo import parallel  # olmo.train does (gloo can abort the process at exit otherwise)

        gc.collect()
        parallel.barrier()
        parallel.shutdown()
    if os.environ.get("RANK", "0") == "0":
        Path(a.result).write_text(json.dumps(res))


def fsdp2(a: argparse.Namespace) -> int:
    rows = {}
    for variant in a.variants.split(";"):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={a.gpus}",
                    str(Path(__file__).resolve()), "worker", "--variant", variant, "--result", f.name,
                    "--steps", str(a.steps), "--warmup", str(a.warmup), "--attn", a.attn]
            t0 = time.perf_counter()
            proc = subprocess.run(argv, env=_env(), cwd=ROOT)
            text = Path(f.name).read_text() if proc.returncode == 0 else ""
        if not text:
            print(f"{variant:<32} failed (exit {proc.returncode})", flush=True)
            continue
        r = json.loads(text)
        r["mfu"] = r["tokens_per_s_per_gpu"] * r["flops_per_token"] / PEAK_TFLOPS
        rows[variant] = r
        print(f"{variant:<32} {r['tokens_per_s_per_gpu']:>8,.0f} tok/s/GPU  {r['step_s'] * 1e3:7.1f} ms/step  MFU "
              f"{r['mfu']:.3f}  peak {r['peak_gb']:5.1f} GB/GPU  ({time.perf_counter() - t0:.0f} s)", flush=True)
        if a.out:
            Path(a.out).write_text("".join(json.dumps({"variant": k, **v}) + "\n" for k, v in rows.items()))
    best_core = max((v["tokens_per_s_per_gpu"] for k, v in rows.items() if k.startswith("olmo-core")), default=0)
    for k, v in rows.items():
        if k.startswith("ours") and best_core:
            print(f"{k} / best OLMo-core: {v['tokens_per_s_per_gpu'] / best_core:.3f}x (target >= 1.30x)")
    return 0 if rows else 1


# ------------------------------------------------------------------------------- (c): cost as sequences grow
LENGTH_IMPLS = ("ours:attn=flash_attn_3,ac=auto", "olmo-core-compile:attn=flash_3")


def run_impl(impl: str, seq: int, a: argparse.Namespace) -> dict[str, Any] | None:
    """One implementation at one length through bench/train_throughput.py (its own process); None if it failed."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as f:
        argv = [sys.executable, str(HERE / "train_throughput.py"), "--model", "olmo3_7b", "--layers", str(a.layers),
                "--batch", "1", "--seq", str(seq), "--steps", str(a.warmup + a.steps), "--warmup", str(a.warmup),
                "--impls", impl + ";", "--anchor", impl, "--out", f.name]
        if a.logs:
            argv += ["--logs", a.logs]
        subprocess.run(argv, env=_env(), cwd=ROOT)
        text = Path(f.name).read_text().strip()
    return json.loads(text.splitlines()[0]) if text else None


def _with(impl: str, key: str, value: str) -> str:
    return impl + ("," if ":" in impl else ":") + f"{key}={value}"


def one_length(seq: int, a: argparse.Namespace, run: Any = run_impl) -> dict[str, Any]:
    """Ours with ac=auto, then OLMo-core with the blocks ours checkpointed (every block if that does not fit)."""
    ours_impl, core_impl = a.length_impls.split(";")
    ours = run(ours_impl, seq, a)
    blocks = (ours or {}).get("ac_blocks") or []
    same = "+".join(str(b) for b in blocks) or "none"
    core, core_ckpt = run(_with(core_impl, "ckpt", same), seq, a), same
    for fallback in (f for f in a.core_fallbacks.split(";") if f and f != same):
        if core is not None:
            break
        core, core_ckpt = run(_with(core_impl, "ckpt", fallback), seq, a), fallback
    return {"seq": seq, "ours": ours, "core": core, "ours_ckpt": same, "core_ckpt": core_ckpt,
            "ratio": (ours["tokens_per_s"] / core["tokens_per_s"]) if ours and core else None}


def length_table(rows: list[dict[str, Any]]) -> str:
    def cell(r: dict[str, Any] | None) -> str:
        return "failed" if r is None else f"{r['tokens_per_s']:,} tok/s, {r['peak_mem_gb']} GB"

    lines = ["| tokens per sequence | ours (ac: auto) | checkpointed blocks (ours / OLMo-core) | OLMo-core | ratio |",
             "|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.3f}x" if r["ratio"] else "-"
        lines.append(f"| {r['seq']:,} | {cell(r['ours'])} | {r['ours_ckpt']} / {r['core_ckpt']} | "
                     f"{cell(r['core'])} | {ratio} |")
    return "\n".join(lines)


def lengths(a: argparse.Namespace, run: Any = run_impl) -> int:
    rows = []
    for seq in (int(x) for x in a.seqs.split(",")):
        rows.append(one_length(seq, a, run))
        if a.out:
            Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(length_table(rows))
    met = [r["ratio"] is not None and r["ratio"] >= 1.15 for r in rows]
    print(f"ours >= 1.15x OLMo-core at every length: {'met' if all(met) else 'NOT met'}")
    return 0 if all(r["ours"] and r["core"] for r in rows) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["one", "fsdp2", "lengths", "worker"])
    p.add_argument("--layers", type=int, default=8, help="(a): the first N layers")
    p.add_argument("--impls", default=ONE_IMPLS, help="(a): ';' list for bench/train_throughput.py, anchor first")
    p.add_argument("--gpus", type=int, default=2, help="(b): GPUs of the FSDP2 run")
    p.add_argument("--variants", default=FSDP_VARIANTS,
                   help="(b): ';' list of ours:ac=..,attn=..,precision=fp8 / olmo-core:ac=..,attn=..,fp8=1")
    p.add_argument("--attn", default="flex", help="(b): our attention backend (flex, flash_attn, flash_attn_3)")
    p.add_argument("--seqs", default="8192,16384,32768,65536", help="(c): tokens per sequence, ',' list")
    p.add_argument("--length-impls", default=";".join(LENGTH_IMPLS), help="(c): ours;OLMo-core implementations")
    p.add_argument("--core-fallbacks", default="budget:0.25;full",
                   help="(c): OLMo-core's checkpointing when ours' blocks do not fit it, tried in order")
    p.add_argument("--logs", help="(c): write each failed run's output to this folder")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out", help="also write JSON lines here")
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.mode == "worker":
        worker(a)
        return 0
    return {"one": one_gpu, "fsdp2": fsdp2, "lengths": lengths}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
