"""Benchmark the parts of one olmo2_1B training step in isolation: every GEMM shape and layout, and AdamW.

    python3 bench/step_parts.py                # on a GPU machine

For each matrix product of the step (forward, input gradient, weight gradient of each projection, M = 4 x 4096
tokens) it prints the TFLOP/s torch.mm reaches, as written and computed transposed (C^T = B^T A^T, which may
select another cuBLAS kernel). For the optimizer it prints the memory bandwidth of torch's fused AdamW over the
model's parameter list and of olmo.optim.fused_adamw's kernel over the same tensors, with bf16 and fp32 gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

M, D, F, V, LAYERS = 4 * 4096, 2048, 8192, 100352, 18


def bench(fn: Callable[[], object], reps: int = 20) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps / 1e3


Product = tuple[str, Callable[[], object], Callable[[], object]]


def _products(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> list[Product]:
    """(name, product as the step writes it, the same product computed transposed) for one projection."""
    return [("fwd  x@W^T", lambda: x @ w.t(), lambda: (w @ x.t()).t()),
            ("dgrad g@W", lambda: g @ w, lambda: (w.t() @ g.t()).t()),
            ("wgrad g^T@x", lambda: g.t() @ x, lambda: (x.t() @ g).t())]


def gemms() -> None:
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    total_ms = 0.0
    for name, n_out, n_in, count in (("qkvo", D, D, 4), ("w1/w3", F, D, 2), ("w2", D, F, 1)):
        x, w, g = rand(M, n_in), rand(n_out, n_in), rand(M, n_out)
        for kind, fn, alt in _products(x, w, g):
            flop = 2 * M * n_in * n_out
            t, t_alt = bench(fn), bench(alt)
            total_ms += count * LAYERS * min(t, t_alt) * 1e3
            print(f"{name:6} {kind:12} {flop / t / 1e12:6.0f} TF/s  transposed {flop / t_alt / 1e12:6.0f} TF/s")
    for name, n_out, n_in in (("qkvo", D, D), ("w1/w3", F, D), ("w2", D, F)):
        x, wt, g = rand(M, n_in), rand(n_in, n_out), rand(M, n_out)
        flop = 2 * M * n_in * n_out
        fwd, dgrad, wgrad = (bench(lambda: x @ wt), bench(lambda: g @ wt.t()),  # noqa: B023
                             bench(lambda: x.t() @ g))  # noqa: B023
        print(f"{name:6} weight stored transposed (in, out): fwd {flop / fwd / 1e12:4.0f}  dgrad "
              f"{flop / dgrad / 1e12:4.0f}  wgrad {flop / wgrad / 1e12:4.0f} TF/s")
    rows = 8192
    h, wl, gl = rand(rows, D), rand(V, D), rand(rows, V)
    wlt = wl.t().contiguous()
    flop = 2 * rows * D * V
    for label, fn in (("logits h@W^T", lambda: h @ wl.t()), ("logits h@WT", lambda: h @ wlt),
                      ("grad_x gl@W", lambda: gl @ wl), ("grad_x gl@WT^T", lambda: gl @ wlt.t()),
                      ("grad_w gl^T@h", lambda: gl.t() @ h), ("grad_wT h^T@gl", lambda: h.t() @ gl)):
        print(f"lm-head {label:16} {flop / bench(fn) / 1e12:6.0f} TF/s")
    print(f"block GEMMs at the better layout: {total_ms:.1f} ms per step (18 layers)")


def adamw() -> None:
    from olmo.optim.fused_adamw import adamw_step

    # agreement with torch.optim.AdamW over 3 steps, bf16 gradients upcast for torch
    ref = torch.randn(1000, 37, device="cuda")
    mine, shadow = ref.clone(), ref.to(torch.bfloat16)
    ref.requires_grad_(True)
    opt = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    m, v, step = torch.zeros_like(mine), torch.zeros_like(mine), torch.zeros((), device="cuda")
    for _ in range(3):
        g = torch.randn_like(mine).to(torch.bfloat16)
        ref.grad = g.float()
        opt.step()
        step += 1
        adamw_step([mine], [g], [m], [v], [step], lr=torch.tensor(1e-2, device="cuda"), betas=(0.9, 0.95), eps=1e-8,
                   weight_decay=0.1, shadows=[shadow])
    print(f"fused_adamw vs torch AdamW after 3 steps: max abs diff {(mine - ref.detach()).abs().max().item():.2e}, "
          f"bf16 copy diff {(shadow.float() - mine.to(torch.bfloat16).float()).abs().max().item():.1e}")

    shapes = [(V, D), (V, D)] + [(D, D)] * 4 * LAYERS + [(F, D), (F, D), (D, F)] * LAYERS + [(D,)] * 5 * LAYERS
    params = [torch.randn(s, device="cuda") for s in shapes]
    n = sum(p.numel() for p in params)
    for grad_dtype in (torch.float32, torch.bfloat16):
        grads = [torch.randn_like(p).to(grad_dtype) for p in params]
        ms, vs = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
        steps = [torch.zeros((), device="cuda") for _ in params]
        moved = n * (4 * 2 + 4 * 4 + 2 * grad_dtype.itemsize)
        if grad_dtype == torch.float32:
            t = bench(lambda: torch._fused_adamw_(params, grads, ms, vs, [], steps, lr=1e-4, beta1=0.9,  # noqa: B023
                                                  beta2=0.95, weight_decay=0.1, eps=1e-8, amsgrad=False,
                                                  maximize=False), reps=5)
            print(f"torch fused AdamW, fp32 grads: {t * 1e3:6.2f} ms, {moved / t / 1e12:.2f} TB/s")
        ones = [torch.ones((), device="cuda") for _ in params]
        lr = torch.tensor(1e-4, device="cuda")
        scale = torch.ones((), device="cuda")
        shadows = [p.to(torch.bfloat16) for p in params]
        t = bench(lambda: adamw_step(params, grads, ms, vs, ones, lr=lr, betas=(0.9, 0.95), eps=1e-8,  # noqa: B023
                                     weight_decay=0.1, grad_scale=scale, shadows=shadows), reps=5)  # noqa: B023
        moved_s = moved + 2 * n
        print(f"olmo fused_adamw, {str(grad_dtype)[6:]} grads + bf16 copy: {t * 1e3:6.2f} ms, "
              f"{moved_s / t / 1e12:.2f} TB/s")


if __name__ == "__main__":
    print(torch.cuda.get_device_name())
    gemms()
    adamw()
