"""Diagnostic: the kernels of one olmo2_1B training step at the benchmark's shapes, per block, with their times.

    TORCH_LOGS=output_code python3 bench/block_kernels.py > kernels.txt 2> output_code.txt

Builds the benchmark model with one block (every block compiles to the same kernels), runs compiled steps as the
trainer does (bf16 copies, chunked loss, the Triton AdamW) and prints every GPU kernel of one step with its
time; with TORCH_LOGS=output_code the Triton source inductor generated goes to stderr, so each kernel's loads
and stores can be read next to its time (bytes moved / time = how far it is from the ~4.3 TB/s roofline).
"""

from __future__ import annotations

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from olmo.config import ModelConfig, OptimConfig
from olmo.model import build_model
from olmo.optim.optimizer import build_optimizer, clip_and_step
from olmo.parallel import apply_compile

VOCAB, BATCH, SEQ = 100352, 4, 4096


def main() -> None:
    cfg = ModelConfig.olmo2_1b()
    cfg.vocab_size, cfg.n_layers, cfg.attn_backend = VOCAB, 1, sys.argv[1] if len(sys.argv) > 1 else "sdpa"
    device = torch.device("cuda")
    model = build_model(cfg, device, seed=0)
    apply_compile(model)
    opt = build_optimizer(model, OptimConfig(lr=1e-4), device, copies_dtype=torch.bfloat16)
    x = torch.randint(0, VOCAB - 100, (BATCH, SEQ), device=device)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _, _ = model(x, labels=x)
        loss.backward()
        clip_and_step(model, opt, 1.0)
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    rows = [(e.key, e.count // 5, e.device_time_total / 5) for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(t for _, _, t in rows)
    print(f"one step, 1 block + embedding + loss + optimizer: {total / 1e3:.2f} ms of kernels")
    for name, calls, t in sorted(rows, key=lambda r: -r[2]):
        print(f"{t / 1e3:8.3f} ms  {calls:3d} calls  {name[:150]}")


if __name__ == "__main__":
    main()
