"""AdamW with OLMo's parameter groups, and the learning-rate schedule as a pure function of the step.

The schedule is computed from the step number alone (no scheduler object to checkpoint), which is one reason a
resumed run continues bit-for-bit: the LR at step N is the same whether or not the run was interrupted.
"""

from __future__ import annotations

import math

import torch

from olmo.config import OptimConfig


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig, device: torch.device,
                    copies_dtype: torch.dtype | None = None) -> torch.optim.AdamW:
    """AdamW; weight decay on every parameter except the embedding (OLMo-core's OLMo 2/3 scripts).

    With `copies_dtype` (bf16 compute in one process on a GPU, and `optim.compute_copies` on) the block weights
    get bf16 copies that the optimizer keeps (olmo/optim/mixed_precision.py): same numbers, less memory traffic."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        (no_decay if name.startswith("embeddings.") else decay).append(p)
    # `initial_lr` (the peak LR, which our schedule never reads) is the field OLMo-core's optimizers and schedulers
    # keep in every group: without it in our checkpoints its Trainer refuses to load their optimizer state
    groups = [{"params": decay, "weight_decay": cfg.weight_decay, "initial_lr": cfg.lr},
              {"params": no_decay, "weight_decay": 0.0, "initial_lr": cfg.lr}]
    betas = (cfg.betas[0], cfg.betas[1])
    if copies_dtype is not None and cfg.compute_copies:
        from olmo.optim.mixed_precision import MasterAdamW, attach_compute_copies

        copies = attach_compute_copies(model, copies_dtype)
        return MasterAdamW(groups, copies, lr=cfg.lr, betas=betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    fused = cfg.fused if cfg.fused is not None else device.type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas, eps=cfg.eps, fused=fused)


def clip_and_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, max_norm: float) -> torch.Tensor:
    """Clip the gradients to `max_norm` (total 2-norm) and take the optimizer step; returns the norm before
    clipping. With a fused kernel (torch's fused AdamW, or MasterAdamW's, which reads the bf16 copies' gradients)
    the clip costs no extra pass over the gradients: the kernel's `grad_scale` input (meant for AMP's GradScaler:
    it divides every gradient while updating) is set to max(1, norm / max_norm), which is exactly the clip.
    Otherwise clip_grad_norm_ scales the gradients first."""
    from olmo.optim.mixed_precision import MasterAdamW

    if isinstance(optimizer, MasterAdamW):
        grads = optimizer.gradients()  # the copies' gradients where a weight has a copy
    else:
        params = [p for p in model.parameters() if p.grad is not None]
        fused = all(g.get("fused") for g in optimizer.param_groups)
        plain = all(type(p.grad) is torch.Tensor for p in params)  # DTensor gradients (FSDP2): the generic path
        if not (fused and plain and math.isfinite(max_norm)):
            from olmo.parallel import clip_grad_norm_  # DTensor-aware: FSDP2's per-shard norms summed over ranks

            norm = clip_grad_norm_(params, max_norm)
            optimizer.step()
            return norm
        grads = [p.grad for p in params]  # type: ignore[misc]
    norm = total_norm(grads)
    scale = torch.clamp(norm / max_norm, min=1.0).to(torch.float32) if math.isfinite(max_norm) else None
    optimizer.grad_scale = scale  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        optimizer.grad_scale = None  # type: ignore[attr-defined]
    return norm


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all `grads` together, accumulated in fp32 whatever their dtypes (one fused pass per dtype)."""
    if not grads:
        return torch.zeros(())
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    norms = [n for group in by_dtype.values() for n in torch._foreach_norm(group, 2.0, dtype=torch.float32)]
    return torch.linalg.vector_norm(torch.stack(norms))


def lr_at(step: int, total: int, cfg: OptimConfig) -> float:
    """LR for optimizer step `step` (0-based): linear warmup from ~0 to `lr`, then cosine or linear decay to
    `lr * final_lr_ratio` at `total`, or constant.

    As OLMo-core's schedulers (CosWithWarmup, LinearWithWarmup), which see the trainer's 1-based global step: the
    warmup reaches `lr` on step `warmup_steps`, the decay starts on the next step, and the last step of the run
    takes the final LR. Counting the decay from the 0-based step instead would hold the peak for two steps and
    lag OLMo-core's LR by one step for the rest of the run (bench/loss_curves.py shows it in the loss)."""
    t = step + 1
    if cfg.warmup_steps and t < cfg.warmup_steps:
        return cfg.lr * t / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, total - cfg.warmup_steps)
    # t >= total: the final LR, even when the warmup spans the whole run (OLMo-core checks this first too)
    progress = 1.0 if t >= total else (t - cfg.warmup_steps) / span
    final = cfg.lr * cfg.final_lr_ratio
    if cfg.schedule == "linear":
        return cfg.lr - (cfg.lr - final) * progress
    return final + (cfg.lr - final) * 0.5 * (1 + math.cos(math.pi * progress))
