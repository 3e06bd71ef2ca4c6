"""Can the optimizer hide behind the GEMMs? The lever "overlap the optimizer with the step", measured alone.

    python3 bench/overlap.py [--params 2.44e9] [--tokens 8192]     # on a GPU machine

With gradient clipping the AdamW update of a step needs every gradient's norm first, so it cannot start during
that step's backward; what remains is to run it beside the next step's forward (each block's update before that
block's forward, the others on a second stream). That pays only if the GPU runs a memory-bound kernel and a
compute-bound GEMM at once. This bench measures exactly that, on the OLMo 3 7B shapes: the forward GEMMs of one
block at --tokens tokens (q/k/v/out and the SwiGLU projections, bf16), repeated to ~100 ms, alone; the
trainer's Triton AdamW (olmo.optim.fused_adamw, bf16 gradients, bf16 copy written) over --params parameters,
alone; then both started together on two streams. It prints the three times and the share of the AdamW time
that the concurrent run hid: 100% means the optimizer came for free, 0% that the two only took turns.
"""

from __future__ import annotations

import argparse
import json

import torch

from olmo.optim.fused_adamw import adamw_step

D, FF = 4096, 11008


def _gemm_chain(tokens: int, reps: int) -> object:
    x = torch.randn(tokens, D, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(tokens, FF, device="cuda", dtype=torch.bfloat16)
    w_d = torch.randn(D, D, device="cuda", dtype=torch.bfloat16) * 0.02
    w_up = torch.randn(FF, D, device="cuda", dtype=torch.bfloat16) * 0.02
    w_down = torch.randn(D, FF, device="cuda", dtype=torch.bfloat16) * 0.02

    def run() -> None:
        for _ in range(reps):
            for _ in range(4):  # q, k, v, out
                torch.mm(x, w_d.t())
            torch.mm(x, w_up.t())  # gate
            torch.mm(x, w_up.t())  # up
            torch.mm(h, w_down.t())  # down
    return run


def _adamw(params: int) -> object:
    chunk = D * FF  # tensors of one projection's size, as the model's
    sizes = [chunk] * (params // chunk)
    ps = [torch.randn(n, device="cuda") for n in sizes]
    gs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for n in sizes]
    ms = [torch.zeros(n, device="cuda") for n in sizes]
    vs = [torch.zeros(n, device="cuda") for n in sizes]
    cs = [torch.empty(n, device="cuda", dtype=torch.bfloat16) for n in sizes]
    ts = [torch.ones((), device="cuda") for _ in sizes]
    lr = torch.full((), 1e-4, device="cuda")

    def run() -> None:
        adamw_step(ps, gs, ms, vs, ts, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, shadows=cs)
    return run


def _time(fn: object, reps: int = 5) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # type: ignore[operator]
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()  # type: ignore[operator]
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=2.44e9, help="parameters the AdamW updates (8-layer OLMo 3 7B)")
    ap.add_argument("--tokens", type=int, default=8192)
    a = ap.parse_args()
    adam = _adamw(int(a.params))
    t_adam = _time(adam)
    one = _gemm_chain(a.tokens, 1)
    t_one = _time(one)
    reps = max(1, round(100.0 / t_one))
    gemms = _gemm_chain(a.tokens, reps)
    t_gemm = _time(gemms)
    side = torch.cuda.Stream()

    def both() -> None:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            adam()  # type: ignore[operator]
        gemms()  # type: ignore[operator]
        torch.cuda.current_stream().wait_stream(side)

    t_both = _time(both)
    hidden = (t_gemm + t_adam - t_both) / t_adam
    row = {"tokens": a.tokens, "params": int(a.params), "gemm_ms": round(t_gemm, 2), "adamw_ms": round(t_adam, 2),
           "both_ms": round(t_both, 2), "adamw_hidden": round(hidden, 3)}
    print(f"GEMMs alone {t_gemm:.1f} ms, AdamW alone {t_adam:.1f} ms ({a.params / 1e9:.2f}B parameters), "
          f"both on two streams {t_both:.1f} ms: {hidden:.0%} of the AdamW time hidden")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
