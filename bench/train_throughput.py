"""Benchmark: training tokens/s of the bundled trainer against OLMo-core and Hugging Face, on one GPU, same run.

    python bench/train_throughput.py                      # ours + the anchors whose packages are importable
    python bench/train_throughput.py --impls ours,ours-eager --steps 12

Shape: OLMo-core's olmo2_1B (d_model 2048, 18 layers, 16 heads, MLP 8192, vocab 100352), batch 4 x 4096
tokens, fp32 master weights, bf16 autocast, fused AdamW, random tokens. Every implementation runs in its own
process (a clean CUDA context, an honest peak-memory figure) and prints one JSON line; this script prints the table
and the ratios against the anchors measured in the same invocation. Reference figures measured earlier on
one H200: OLMo-core compiled 54,652 tok/s at 55.4 GB, OLMo-core eager 34,823, HF Olmo2 SDPA 33,779.

`ours` is the trainer's own step with recipes/olmo2_1b.yaml's settings (olmo.train building blocks: build_model,
the attention backend `auto` picks, apply_compile, build_optimizer with the bf16 weight copies, the chunked loss,
grad clipping, the step replayed as a CUDA graph), not a stripped-down copy. OLMo-core needs `ai2-olmo-core`
importable (carry its wheel; bench/stubs/ stands in for the cloud SDKs it imports but never uses); HF needs
`transformers`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VOCAB, TOKENS_VOCAB = 100352, 100278
IMPLS = ("ours", "ours-eager", "olmo-core-compile", "olmo-core-eager", "hf-sdpa")
ANCHOR = "olmo-core-compile"


def _timed_steps(step: Callable[[Any], Any], steps: int, warmup: int, batch: tuple[int, int]) -> dict:
    import torch

    times, cpu, loss = [], [], 0.0
    for i in range(steps):
        x = torch.randint(0, TOKENS_VOCAB, batch, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(x)
        t1 = time.perf_counter()  # the host has queued (or launched) the whole step
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(t1 - t0)
    dt = sorted(times)[len(times) // 2]
    return {"step_s": round(dt, 4), "tokens_per_s": round(batch[0] * batch[1] / dt),
            "host_ms": round(sorted(cpu)[len(cpu) // 2] * 1e3, 1),
            "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1), "loss": round(float(loss), 4)}


def _apply_sdp(choice: str) -> None:
    """Restrict torch SDPA to one kernel family (process-wide flags; math stays as the fallback)."""
    import torch

    if choice == "default":
        return
    torch.backends.cuda.enable_flash_sdp(choice == "flash")
    torch.backends.cuda.enable_mem_efficient_sdp(choice == "efficient")
    torch.backends.cuda.enable_cudnn_sdp(choice == "cudnn")


def run_ours(args: argparse.Namespace, compiled: bool, opts: dict[str, str]) -> dict:
    import torch

    from olmo.config import OptimConfig
    from olmo.model import build_model
    from olmo.nn.attention import get_backend
    from olmo.optim.optimizer import build_optimizer, clip_and_step
    from olmo.parallel import apply_compile

    cfg = _model_config(args)
    cfg.attn_backend = opts.get("attn", args.attn)
    if cfg.attn_backend == "auto":  # as the trainer: time the installed backends on these shapes, keep the fastest
        from olmo.nn.attention_choice import backend_choice_line, choose

        choice = choose(cfg, args.batch, args.seq, torch.device("cuda"))
        print(backend_choice_line(choice), file=sys.stderr)
        cfg.attn_backend = choice.backend
    cfg.fuse_projections = opts.get("fuse", "0") == "1"
    cfg.residual_dtype = opts.get("residual", cfg.residual_dtype)
    _apply_sdp(opts.get("sdp", "default"))
    device = torch.device("cuda")
    get_backend(cfg.attn_backend, device, windowed=cfg.windowed)
    model = build_model(cfg, device, seed=0)
    if opts.get("fp8") == "1":  # precision: fp8, as the trainer: the blocks' projections in float8, then compile
        from olmo.nn.float8 import apply_float8

        apply_float8(model)
    elif opts.get("fp8") == "swap":  # the same recipe by torchao's module swap (how OLMo-core applies it, and how
        # the trainer did before its projections called torchao's matmul): the weight cast reads the fp32 master
        import torchao.float8 as torchao_float8

        from olmo.nn.float8 import convertible

        cfg.fuse_projections = False
        torchao_float8.convert_to_float8_training(model.blocks, config=torchao_float8.Float8LinearConfig(),
                                                  module_filter_fn=convertible)
        for block in model.blocks.values():
            setattr(block.get_submodule("attention"), "fused_qkv", False)  # noqa: B010
            setattr(block.get_submodule("feed_forward"), "fused", False)  # noqa: B010
    model.lm_head.fused_loss = not args.plain_loss
    if "chunk" in opts:
        model.lm_head.loss_chunk_rows = int(opts["chunk"])
    if opts.get("cdt") == "1":  # inductor's coordinate-descent tuning of its Triton kernels' launch configs
        import torch._inductor.config as inductor_config

        inductor_config.coordinate_descent_tuning = True
    ac_note = apply_ours_ac(model, cfg, opts.get("ac", "none"), args.batch, args.seq, device,
                            copies=opts.get("copies", "1") == "1")
    if compiled and "mode" in opts:  # a torch.compile mode other than the trainer's default
        for block in model.blocks.values():
            block.compile(mode=opts["mode"])
    elif compiled:
        apply_compile(model)
    if opts.get("blas"):
        torch.backends.cuda.preferred_blas_library(opts["blas"])
    # as the trainer on one GPU: bf16 copies of the block weights kept by the optimizer (copies=0: plain autocast)
    ocfg = OptimConfig(lr=1e-4, fused=True, compute_copies=opts.get("copies", "1") == "1")
    opt = build_optimizer(model, ocfg, device, copies_dtype=torch.bfloat16)
    graphed = compiled and opts.get("graph", "1") == "1"  # recipes/olmo2_1b.yaml: compile + cuda_graph

    def core(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        labels = torch.cat([x[:, 1:], torch.full_like(x[:, :1], -100)], dim=1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _, _ = model(x, labels=labels)
        loss.backward()
        norm = clip_and_step(model, opt, 1.0)
        return loss.detach(), norm

    if graphed:  # as olmo.train with cuda_graph: the whole step one CUDA graph, the LR a tensor it reads
        from olmo.cuda_graph import GraphedStep
        from olmo.optim.mixed_precision import MasterAdamW

        assert isinstance(opt, MasterAdamW), "cuda_graph needs the bf16 weight copies (copies=1)"
        opt.lr_override = torch.tensor(1e-4, device=device)
        graph_step = GraphedStep(core, opt.zero_grad, device)

        def step(x: torch.Tensor) -> float:
            return graph_step(x)[0]  # type: ignore[return-value]
    else:
        def step(x: torch.Tensor) -> float:
            out = core(x)[0]
            opt.zero_grad(set_to_none=True)
            return out  # type: ignore[return-value]

    out = _timed_steps(step, args.steps, args.warmup, (args.batch, args.seq))
    if args.profile:
        _profile(step, (args.batch, args.seq), args.profile)
    n = sum(p.numel() for p in model.parameters())
    return {**out, "params": n, "emb": model.embeddings.weight.numel(), **ac_note}


def apply_ours_ac(model: Any, cfg: Any, mode: str, batch: int, seq: int, device: Any, copies: bool) -> dict:
    """`ac=auto|full|none` for ours, as the trainer's `parallel.ac` (olmo.parallel.apply_ac, before compile):
    returns the blocks it checkpointed and what auto said, so OLMo-core can be given the same blocks."""
    from olmo.config import TrainConfig
    from olmo.parallel import apply_ac

    train = TrainConfig(model=cfg, micro_batch_size=batch, precision="bf16" if device.type == "cuda" else "fp32")
    train.data.seq_len, train.parallel.ac, train.optim.compute_copies = seq, mode, copies
    said = apply_ac(model, train, device)
    blocks = [int(n) for n, b in model.blocks.items() if type(b).__name__ == "CheckpointWrapper"]
    return {"ac": mode, "ac_blocks": blocks, "ac_said": said or ""}


def apply_core_ckpt(model: Any, spec: str) -> list[int]:
    """`ckpt=none|full|0+1+5|budget:F` for OLMo-core: its own activation checkpointing (before its compile), every
    block, the listed ones (selected_modules, so both trainers recompute the same blocks), or its compile-native
    memory budget F in [0, 1] (no block wrapped: the compiler picks what to recompute). Returns the wrapped blocks."""
    from olmo_core.nn.transformer import TransformerActivationCheckpointingMode as Mode

    if spec.startswith("budget:"):
        model.apply_activation_checkpointing(Mode.budget, activation_memory_budget=float(spec.split(":", 1)[1]))
    elif spec == "full":
        model.apply_activation_checkpointing(Mode.full)
    elif spec not in ("", "none"):
        model.apply_activation_checkpointing(Mode.selected_modules,
                                             modules=[f"blocks.{int(i)}" for i in spec.split("+")])
    return [int(n) for n, b in model.blocks.items() if type(b).__name__ == "CheckpointWrapper"]


def _profile(step: Callable[[Any], Any], batch: tuple[int, int], path: str) -> None:
    """Two profiled steps; the kernel table (by total CUDA time) goes to `path`, the top rows to stderr, followed
    by where the GPU time goes (kernel families) and where it idles (gaps between kernels, the largest named)."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    x = torch.randint(0, TOKENS_VOCAB, batch, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step(x)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=90)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.loads(Path(f.name).read_text())
    summary = _gaps(trace["traceEvents"], steps=2)
    Path(path).write_text(table + "\n" + summary)
    print(summary, file=sys.stderr)


FAMILIES = (("gemm", ("gemm", "nvjet", "cutlass", "xmma", "cublas")), ("attention", ("flash", "fmha", "cudnn", "attn")),
            ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel")), ("triton", ("triton",)))


def _gaps(events: list[dict], steps: int) -> str:
    """Per-step GPU busy time by kernel family, and the idle gaps between consecutive kernels."""
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
                     key=lambda e: e["ts"])
    if not kernels:
        return "no kernel events in the trace\n"
    fam: dict[str, float] = {}
    for e in kernels:
        name = e["name"].lower()
        key = next((f for f, keys in FAMILIES if any(k in name for k in keys)), "other")
        fam[key] = fam.get(key, 0.0) + e["dur"]
    gaps = []
    end = kernels[0]["ts"] + kernels[0]["dur"]
    for prev, e in itertools.pairwise(kernels):
        if e["ts"] > end:
            gaps.append((e["ts"] - end, prev["name"][:60], e["name"][:60]))
        end = max(end, e["ts"] + e["dur"])
    span = end - kernels[0]["ts"]
    idle = sum(g for g, _, _ in gaps)
    lines = [f"per step: span {span / steps / 1e3:.1f} ms, busy {(span - idle) / steps / 1e3:.1f} ms, "
             f"idle {idle / steps / 1e3:.1f} ms in {len(gaps) // steps} gaps "
             f"({sum(g for g, _, _ in gaps if g > 50) / steps / 1e3:.1f} ms in gaps > 50 us)",
             "busy by family (ms/step): " + ", ".join(f"{k} {v / steps / 1e3:.1f}" for k, v in
                                                      sorted(fam.items(), key=lambda kv: -kv[1]))]
    lines += [f"  gap {g:8.0f} us after {a}  before {b}" for g, a, b in sorted(gaps, reverse=True)[:8]]
    return "\n".join(lines) + "\n"


def _model_config(args: argparse.Namespace) -> Any:
    """Our ModelConfig for --model (olmo2_1b or olmo3_7b) with --layers and --seq applied."""
    from olmo.config import ModelConfig

    cfg = getattr(ModelConfig, args.model)()
    cfg.vocab_size, cfg.n_layers = VOCAB, args.layers
    cfg.max_seq_len = max(cfg.max_seq_len, args.seq)
    return cfg


def run_olmo_core(args: argparse.Namespace, compiled: bool, opts: dict[str, str] | None = None) -> dict:
    """OLMo-core's own model for --model (its olmo2_1B / olmo3_7B factory), attn=<its backend name> to pick one
    (olmo3_7B defaults to flash_2: its sliding windows need a flash backend)."""
    import torch
    from olmo_core.nn.transformer import TransformerConfig

    factory = {"olmo2_1b": "olmo2_1B", "olmo3_7b": "olmo3_7B"}[args.model]
    kw: dict[str, Any] = {}
    if opts and "attn" in opts:
        from olmo_core.nn.attention import AttentionBackendName

        kw["attn_backend"] = AttentionBackendName(opts["attn"])
    cfg = getattr(TransformerConfig, factory)(vocab_size=VOCAB, **kw)
    cfg.n_layers = args.layers
    model = cfg.build(init_device="cuda")
    if hasattr(model, "init_weights"):
        model.init_weights(device=torch.device("cuda"))
    if opts and opts.get("fp8") == "1":  # its own float8 (torchao Float8Linear, all but the LM head), before compile
        from olmo_core.float8 import Float8Config

        model.apply_fp8(Float8Config(enabled=True))
    ckpt = apply_core_ckpt(model, (opts or {}).get("ckpt", "none"))
    if compiled:
        model.apply_compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(x: torch.Tensor) -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x, labels=x)
        loss = out.loss if hasattr(out, "loss") else out
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    out = _timed_steps(step, args.steps, args.warmup, (args.batch, args.seq))
    return {**out, "params": sum(p.numel() for p in model.parameters()), "emb": model.embeddings.weight.numel(),
            "ac_blocks": ckpt}


def run_hf(args: argparse.Namespace) -> dict:
    import torch
    from transformers import Olmo2Config, Olmo2ForCausalLM

    shape: dict[str, Any] = dict(  # rope_theta is accepted at run time though transformers 5's stubs omit it
        vocab_size=VOCAB, hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers,
        num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=args.seq, rope_theta=500000.0,
        rms_norm_eps=1e-6, attention_bias=False, tie_word_embeddings=False)
    cfg = Olmo2Config(**shape)
    cfg._attn_implementation = "sdpa"
    model = Olmo2ForCausalLM(cfg).cuda()  # type: ignore[call-arg]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(x: torch.Tensor) -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    out = _timed_steps(step, args.steps, args.warmup, (args.batch, args.seq))
    return {**out, "params": sum(p.numel() for p in model.parameters()),
            "emb": model.model.embed_tokens.weight.numel()}


def run_one(args: argparse.Namespace) -> dict:
    # "ours:fuse=1,sdp=cudnn,attn=flash_attn,chunk=16384,mode=reduce-overhead,cdt=1,copies=0,graph=0,fp8=1,ac=auto"
    # (fp8=swap: the same float8 recipe through torchao's Float8Linear module swap)
    # runs a variant of ours; "olmo-core-compile:attn=flash_3,fp8=1,ckpt=0+1" one of OLMo-core
    impl, _, spec = args.run.partition(":")
    opts = dict(kv.split("=", 1) for kv in spec.split(",") if "=" in kv)
    runners: dict[str, Callable[[], dict]] = {
        "ours": lambda: run_ours(args, compiled=True, opts=opts),
        "ours-eager": lambda: run_ours(args, compiled=False, opts=opts),
        "olmo-core-compile": lambda: run_olmo_core(args, compiled=True, opts=opts),
        "olmo-core-eager": lambda: run_olmo_core(args, compiled=False, opts=opts),
        "hf-sdpa": lambda: run_hf(args),
    }
    start = time.perf_counter()
    out = runners[impl]()
    impl = args.run
    # PaLM-style FLOPs per token as OLMo-core counts them (attention non-causal; sliding layers count their window)
    flops = _model_config(args).flops_per_token(args.seq)
    out.update(impl=impl, wall_s=round(time.perf_counter() - start, 1),
               mfu_989=round(out["tokens_per_s"] * flops / 989e12, 3))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impls", default=",".join(IMPLS),
                        help="comma list, or ';' list when variants carry options: 'ours:fuse=1,sdp=cudnn;ours'")
    parser.add_argument("--steps", type=int, default=12, help="steps in all, the warm-up steps included")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--model", default="olmo2_1b", choices=["olmo2_1b", "olmo3_7b"],
                        help="the shape: OLMo-core's olmo2_1B or olmo3_7B (first --layers layers)")
    parser.add_argument("--anchor", default=ANCHOR, help="the implementation the ratios are taken against")
    parser.add_argument("--attn", default="auto",
                        help="our attention backend: auto (timed, as the trainer) or a name in "
                        "olmo.nn.attention.BACKENDS")
    parser.add_argument("--plain-loss", action="store_true", help="ours: materialise the logits (no chunked loss)")
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help="ours: write a 2-step kernel profile table to this file")
    parser.add_argument("--out", help="also write the results as JSON lines to this file")
    parser.add_argument("--logs", help="write the output of each implementation that fails to this folder")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error(f"--steps counts every step, the {args.warmup} warm-up steps included: give more than that")
    if args.run:
        print("RESULT " + json.dumps(run_one(args)), flush=True)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE / "stubs"), str(HERE.parent),
                                                                     os.environ.get("PYTHONPATH", "")]))}
    results: dict[str, dict] = {}
    passthrough = [f"--steps={args.steps}", f"--warmup={args.warmup}", f"--batch={args.batch}",
                   f"--seq={args.seq}", f"--layers={args.layers}", f"--attn={args.attn}", f"--model={args.model}"]
    passthrough += ["--plain-loss"] if args.plain_loss else []
    for impl in [i for i in args.impls.split(";" if ";" in args.impls else ",") if i]:
        extra = [f"--profile={args.profile}.{len(results)}.txt"] if args.profile and impl.startswith("ours") else []
        proc = subprocess.run([sys.executable, __file__, "--run", impl, *passthrough, *extra], capture_output=True,
                              text=True, env=env)
        if extra:
            print("\n".join(proc.stderr.splitlines()[-11:]))
        for ln in proc.stderr.splitlines():
            if ln.startswith("attention backend"):
                print(f"  {impl}: {ln}")
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            print(f"{impl:<18} failed: {' | '.join(tail)}")
            if args.logs:  # the whole story of a failure (an OOM, a recompute mismatch), not its last lines
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                name = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{impl}-{args.seq}")
                Path(args.logs, f"failed-{name}.log").write_text(proc.stderr + proc.stdout)
            continue
        results[impl] = json.loads(line[len("RESULT "):])
        if args.out:  # as each finishes: a run cut short by a time limit keeps what it measured
            Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in results.values()))
        r = results[impl]
        print(f"{impl:<18} {r['tokens_per_s']:>8,} tok/s  {r['step_s'] * 1e3:7.1f} ms/step  MFU {r['mfu_989']:.3f}  "
              f"peak {r['peak_mem_gb']:5.1f} GB  loss {r['loss']:.3f}  host {r['host_ms']} ms  ({r['wall_s']} s)",
              flush=True)
    if "ours" in results:
        for other in [i for i in results if i != "ours"]:
            print(f"ours / {other}: {results['ours']['tokens_per_s'] / results[other]['tokens_per_s']:.3f}x")
    if args.anchor in results:
        base = results[args.anchor]["tokens_per_s"]
        for impl in [i for i in results if i != args.anchor]:
            print(f"{impl} / {args.anchor}: {results[impl]['tokens_per_s'] / base:.3f}x")
    if ANCHOR in results and args.model == "olmo2_1b":  # the 1B target, for every variant of ours that ran
        for impl in [i for i in results if i.split(":")[0] == "ours"]:
            ok = results[impl]["tokens_per_s"] >= 1.10 * results[ANCHOR]["tokens_per_s"]
            mem_ok = results[impl]["peak_mem_gb"] <= 55.0
            print(f"{impl}: target >= 1.10x {ANCHOR} at <= 55 GB: {'met' if ok and mem_ok else 'NOT met'}")
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in results.values()))


if __name__ == "__main__":
    main()
