"""AdamW in one pass per tensor that reads bf16 (or fp32) gradients and also writes the bf16 compute copy.

torch's fused AdamW wants gradients in the parameter's dtype. With fp32 master weights and bf16 compute that
costs two extra passes per step: autocast casts every weight to bf16 for the forward, and converts every bf16
weight gradient the GEMM produced to fp32 for the optimizer. `adamw_step` instead reads the bf16 gradient as it
is (the values are the same: the fp32 gradient autocast hands over is the bf16 GEMM output, converted) and, while
it rewrites the fp32 master weight, writes its bf16 copy for the next forward (olmo/optim/mixed_precision.py).

The update is torch's AdamW, decoupled weight decay, per element:

    g = grad / grad_scale                      (grad_scale: the gradient-clip factor, 1 when not clipping)
    p = p * (1 - lr * weight_decay)
    m = beta1 * m + (1 - beta1) * g ;  v = beta2 * v + (1 - beta2) * g^2
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

On CUDA it is one Triton kernel per tensor (measured on an H200 over the 1.6B parameters of olmo2_1B: 12.0 ms
with bf16 gradients and the bf16 copy written, against 16.0 ms for torch's fused AdamW with fp32 gradients and no
copy; bench/step_parts.py); the step counts, learning rate and clip factor are read from device tensors, so the
step can be recorded in a CUDA graph. Elsewhere `adamw_reference` does the same with torch ops.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

BLOCK = 2048  # elements per Triton program: 8 KB of each fp32 stream, enough loads in flight to saturate HBM


def adamw_reference(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                    step: torch.Tensor, lr: torch.Tensor, inv_scale: torch.Tensor, betas: tuple[float, float],
                    eps: float, weight_decay: float, shadow: torch.Tensor | None) -> None:
    """One tensor's update with torch ops (after `step` was incremented), in place."""
    b1, b2 = betas
    g = grad.float() * inv_scale
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(b1).add_(g, alpha=1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(g, g, value=1 - b2)
    step_size = lr / (1 - b1 ** step)
    denom = exp_avg_sq.sqrt() / torch.sqrt(1 - b2 ** step) + eps
    param.sub_(step_size * exp_avg / denom)
    if shadow is not None:
        shadow.copy_(param)


@functools.cache
def _kernel() -> object:
    """The Triton kernel, defined on first use (Triton is imported only on CUDA machines)."""
    import triton
    import triton.language as tl

    @triton.jit
    def adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, s_ptr, step_ptr, lr_ptr, inv_scale_ptr, n, log_b1, log_b2,
                     b1, b2, eps, wd, HAS_SHADOW: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        t = tl.load(step_ptr)
        lr = tl.load(lr_ptr)
        inv_scale = tl.load(inv_scale_ptr)
        step_size = lr / (1.0 - tl.exp(t * log_b1))
        bc2_sqrt = tl.sqrt(1.0 - tl.exp(t * log_b2))
        p = tl.load(p_ptr + offs, mask=mask)
        g = tl.load(g_ptr + offs, mask=mask).to(tl.float32) * inv_scale
        m = tl.load(m_ptr + offs, mask=mask)
        v = tl.load(v_ptr + offs, mask=mask)
        p = p * (1.0 - lr * wd)
        m = b1 * m + (1.0 - b1) * g
        v = b2 * v + (1.0 - b2) * g * g
        p = p - step_size * m / (tl.sqrt(v) / bc2_sqrt + eps)
        tl.store(p_ptr + offs, p, mask=mask)
        tl.store(m_ptr + offs, m, mask=mask)
        tl.store(v_ptr + offs, v, mask=mask)
        if HAS_SHADOW:
            tl.store(s_ptr + offs, p.to(s_ptr.dtype.element_ty), mask=mask)

    return adamw_kernel


def adamw_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
               exp_avg_sqs: Sequence[torch.Tensor], steps: Sequence[torch.Tensor], *, lr: float | torch.Tensor,
               betas: tuple[float, float], eps: float, weight_decay: float, grad_scale: torch.Tensor | None = None,
               shadows: Sequence[torch.Tensor | None] | None = None) -> None:
    """Update `params` in place (and their low-precision `shadows`, where given). `steps` are the per-tensor step
    counts as torch's AdamW keeps them (scalar fp32 tensors on the params' device), already incremented for this
    step; `lr` a float or a scalar tensor there; `grad_scale` a scalar tensor the gradients are divided by."""
    if not params:
        return
    device = params[0].device
    inv_scale = (1.0 / grad_scale.float() if grad_scale is not None else torch.ones((), device=device))
    # torch.full is a fill kernel; torch.tensor(lr, device=...) would copy from the host and wait for the GPU
    lr_t = lr.float() if isinstance(lr, torch.Tensor) else torch.full((), lr, dtype=torch.float32, device=device)
    shadow_list = list(shadows) if shadows is not None else [None] * len(params)
    if not params[0].is_cuda:
        for p, g, m, v, t, s in zip(params, grads, exp_avgs, exp_avg_sqs, steps, shadow_list, strict=True):
            adamw_reference(p, g, m, v, t, lr_t, inv_scale, betas, eps, weight_decay, s)
        return
    kernel = _kernel()
    b1, b2 = betas
    for p, g, m, v, t, s in zip(params, grads, exp_avgs, exp_avg_sqs, steps, shadow_list, strict=True):
        if not all(x.is_contiguous() for x in (p, g, m, v)) or (s is not None and not s.is_contiguous()):
            raise ValueError("adamw_step: the kernel walks tensors as flat arrays; all must be contiguous")
        n = p.numel()
        grid = ((n + BLOCK - 1) // BLOCK,)
        kernel[grid](p, g, m, v, s if s is not None else p, t, lr_t, inv_scale,  # type: ignore[index]
                     n, math.log(b1), math.log(b2), b1, b2, eps, weight_decay,
                     HAS_SHADOW=s is not None, BLOCK=BLOCK, num_warps=8)
