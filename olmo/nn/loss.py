"""Next-token loss straight from the final hidden states, without ever holding the full logits.

With OLMo's 100K-token vocabulary the logits of one 4 x 4096 batch are 16384 x 100352: 3.3 GB in bf16, 6.6 GB
again as fp32 for a stable softmax, and as much for their gradient. `fused_linear_cross_entropy` walks the tokens
in chunks instead: for each chunk it computes the logits, the loss (cross entropy plus OLMo's z-loss) and, right
away, the gradient of the loss with respect to the logits, turns that into the gradients of the hidden states and
of the output weight, and frees the chunk. Backward then only scales what forward already computed. Same math,
same matmuls, a few hundred MB of peak memory instead of ~15 GB (the Liger-Kernel / torchtune "chunked
cross-entropy" idea, written from the formulas).

Gradient of the mean loss L = mean_i [lse_i - l_i[y_i] + m * lse_i^2] with respect to the logits l_i:
softmax(l_i) * (1 + 2 m lse_i) - onehot(y_i), divided by the number of counted tokens.
"""

from __future__ import annotations

import torch

IGNORE = -100
CHUNK_BYTES = 2 << 30  # logits per chunk in the compute dtype: ~2 GiB (8192 rows of a 100K vocab in bf16) keeps
# the matmuls large, the fp32 gradient accumulations few, and the peak ~3.3 GB instead of ~15 GB


def _chunk_loss_and_grad(logits: torch.Tensor, y: torch.Tensor, valid: torch.Tensor, inv_count: torch.Tensor,
                         z_mult: float, need_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """For one chunk of logits (c, V) in the compute dtype: sum of cross entropy, sum of lse^2, and the gradient
    of the mean loss with respect to the logits (in the logits' dtype). Pure elementwise + row reductions, so
    torch.compile turns it into two passes over the chunk instead of the six an eager version makes."""
    lf = logits.float()
    lse = torch.logsumexp(lf, dim=-1)
    target = lf.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1)
    vf = valid.float()
    ce_sum = ((lse - target) * vf).sum()
    z_sum = (lse * lse * vf).sum()
    if not need_grad:
        return ce_sum, z_sum, None
    scale = ((1.0 + 2.0 * z_mult * lse) * vf * inv_count).unsqueeze(1)
    grad = torch.exp(lf - lse.unsqueeze(1)) * scale
    cols = torch.arange(lf.shape[1], device=lf.device)
    grad = torch.where(cols.unsqueeze(0) == y.unsqueeze(1), grad - (vf * inv_count).unsqueeze(1), grad)
    return ce_sum, z_sum, grad.to(logits.dtype)


_COMPILED: dict[str, object] = {}
_GEMM_OUT_DTYPE = "dtype" in torch.ops.aten.addmm.overloads()  # mm/addmm(out_dtype=): torch >= 2.8


def _chunk_fn(device: torch.device) -> object:
    """The compiled chunk function on CUDA (one compilation per chunk shape); plain eager elsewhere."""
    if device.type != "cuda":
        return _chunk_loss_and_grad
    if "cuda" not in _COMPILED:
        _COMPILED["cuda"] = torch.compile(_chunk_loss_and_grad, dynamic=False)
    return _COMPILED["cuda"]


def _accumulate_fp32(acc: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """acc + a @ b in fp32 for low-precision a, b. On CUDA the GEMM itself writes (and accumulates into) the fp32
    result (cuBLAS beta=1), so the (V, d) product never exists in bf16 and no separate mixed-dtype add pass runs
    over the 205M-element weight gradient; elsewhere the product is summed in fp32."""
    if a.is_cuda and a.dtype != torch.float32 and _GEMM_OUT_DTYPE:
        if acc is None:
            return torch.mm(a, b, out_dtype=torch.float32)
        return torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    prod = (a @ b).float()
    return prod if acc is None else acc.add_(prod)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the LM head matmul would run in: autocast's when it is on, else the input's."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


class _FusedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
        z_mult: float, compute_dtype: torch.dtype, chunk: int, need_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n_tok, _ = x.shape
        w = weight.to(compute_dtype)
        valid = labels != IGNORE
        count = valid.sum().clamp(min=1).to(torch.float32)
        grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        grad_w: torch.Tensor | None = None
        ce_sum = torch.zeros((), dtype=torch.float32, device=x.device)
        z_sum = torch.zeros((), dtype=torch.float32, device=x.device)
        step = _chunk_fn(x.device)
        inv_count = 1.0 / count
        with torch.autocast(x.device.type, enabled=False):
            for start in range(0, n_tok, chunk):
                xc = x[start : start + chunk].to(compute_dtype)
                logits = xc @ w.t()  # (c, V) in the compute dtype, as F.linear under autocast would give
                ce_c, z_c, grad_c = step(logits, labels[start : start + chunk],  # type: ignore[operator]
                                         valid[start : start + chunk], inv_count, z_mult, need_grad)
                ce_sum += ce_c
                z_sum += z_c
                if grad_c is None:  # evaluation: the loss is all we want
                    continue
                grad_x[start : start + chunk] = (grad_c @ w).to(x.dtype)
                grad_w = _accumulate_fp32(grad_w, grad_c.t(), xc)
        ce = ce_sum / count
        z = z_mult * z_sum / count
        if grad_w is None:
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        ctx.save_for_backward(grad_x, grad_w.to(weight.dtype))
        ctx.mark_non_differentiable(ce, z)
        return ce + z, ce, z

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_total: torch.Tensor, *_: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        grad_x, grad_w = ctx.saved_tensors  # type: ignore[attr-defined]
        # Scaled in place by the upstream gradient (1/n under gradient accumulation): `grad_w * grad_total`
        # would allocate another 0.8 GB and run torch's broadcasting kernel at ~1.6 TB/s (1 ms per step on an
        # H200); the foreach kernel runs vectorised. A second backward through this graph raises, as autograd
        # sees the saved tensors modified.
        torch._foreach_mul_([grad_w], grad_total.to(grad_w.dtype))
        grad_x.mul_(grad_total.to(grad_x.dtype))
        return grad_x, grad_w, None, None, None, None, None


def fused_linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, z_loss_multiplier: float = 0.0,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(total, ce, z) of next-token prediction from `hidden` (..., d) through `weight` (V, d); -100 labels are
    skipped. Equal to `lm_loss(hidden @ weight.T, labels, z)` up to float summation order."""
    x = hidden.reshape(-1, hidden.shape[-1])
    y = labels.reshape(-1)
    # a power of two that divides typical token counts, so every chunk has one shape (one compilation)
    rows = chunk or 1 << max(0, (CHUNK_BYTES // (2 * weight.shape[0])).bit_length() - 1)
    need_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    total, ce, z = _FusedLinearCE.apply(x, weight, y, float(z_loss_multiplier), _compute_dtype(x), rows, need_grad)
    return total, ce, (z if z_loss_multiplier else None)
