"""fp32 master weights with bf16 compute, without casting: bf16 copies of the block weights, kept by the optimizer.

On one GPU the trainer computes under bf16 autocast with fp32 parameters (as OLMo-core does). Autocast re-casts
every weight to bf16 on every forward, and the bf16 weight gradients are converted to fp32 for the optimizer. Here
each projection weight of the blocks (`olmo.linear.Linear`, 1.2B of olmo2_1B's 1.5B parameters) gets a bf16 copy
that the forward multiplies by; backward leaves the gradient in bf16 on the copy; `MasterAdamW` reads that
gradient, updates the fp32 master weight and its AdamW state as torch's AdamW does, and rewrites the copy, all in
one pass per tensor (olmo/fused_adamw.py). The numbers are the ones autocast gives: autocast multiplies by the same
bf16 rounding of the master weight, and its fp32 gradient is the bf16 GEMM output converted.

The master weights stay the model's parameters and the AdamW state stays torch's (`exp_avg`, `exp_avg_sq`,
`step` per parameter), so state dicts and checkpoints are unchanged and interchangeable with runs without copies.
Loading a state dict into the model refreshes the copies. Only for one process: DDP and FSDP2 hook the
parameters' own gradients (FSDP2 keeps its own bf16 copies through MixedPrecisionPolicy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from olmo.fused_adamw import adamw_step
from olmo.linear import Linear


@dataclass
class ComputeCopies:
    """{master parameter: its low-precision copy}, and the masters whose copy holds the transpose."""

    copies: dict[torch.Tensor, torch.Tensor] = field(default_factory=dict)
    transposed: set[torch.Tensor] = field(default_factory=set)

    @torch.no_grad()
    def refresh(self) -> None:
        """Rewrite every copy from its master (after the masters were loaded)."""
        for master, copy in self.copies.items():
            copy.copy_(master.t() if master in self.transposed else master)


def attach_compute_copies(model: nn.Module, dtype: torch.dtype) -> ComputeCopies:
    """Give every `Linear` of `model` a `dtype` copy of its weight (a leaf that collects the gradient), transposed
    where the layer asks for it. The copies are refreshed whenever a state dict is loaded into `model`."""
    found = ComputeCopies()
    for module in model.modules():
        if isinstance(module, Linear):
            w = module.weight.detach()
            module.compute_weight = (w.t() if module.copy_transposed else w).to(dtype).contiguous().requires_grad_()
            found.copies[module.weight] = module.compute_weight
            if module.copy_transposed:
                found.transposed.add(module.weight)
    model.register_load_state_dict_post_hook(lambda _module, _keys: found.refresh())
    return found


class MasterAdamW(torch.optim.AdamW):
    """torch.optim.AdamW's parameter groups, state and state dict, stepped by `olmo.fused_adamw`: a parameter
    with a copy takes its gradient from the copy and rewrites the copy; the others are updated as usual."""

    def __init__(self, params: Iterable[Any], copies: ComputeCopies, lr: float, betas: tuple[float, float],
                 eps: float, weight_decay: float):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
        self.copies, self.transposed = copies.copies, copies.transposed
        self.grad_scale: torch.Tensor | None = None  # the clip factor, as torch's fused AdamW reads it
        # a learning rate on the device for every group, when the step is replayed as a CUDA graph (the trainer
        # fills it each step; the groups' "lr" floats stay for the state dict and the logs)
        self.lr_override: torch.Tensor | None = None

    def _grad(self, p: torch.Tensor) -> torch.Tensor | None:
        copy = self.copies.get(p)  # a forward that bypassed the copy left the gradient on the master
        return copy.grad if copy is not None and copy.grad is not None else p.grad

    def gradients(self) -> list[torch.Tensor]:
        """Every gradient the next step will apply (the copies' for parameters that have one)."""
        return [g for group in self.param_groups for p in group["params"] if (g := self._grad(p)) is not None]

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for copy in self.copies.values():
            if set_to_none:
                copy.grad = None
            elif copy.grad is not None:
                copy.grad.zero_()

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("MasterAdamW.step takes no closure")
        stale: list[torch.Tensor] = []  # transposed copies whose master took its own gradient: rewritten after
        for group in self.param_groups:
            ps, gs, ms, vs, ts, cs, flips = [], [], [], [], [], [], []
            for p in group["params"]:
                g = self._grad(p)
                if g is None:
                    continue
                state = self.state[p]
                if not state:  # torch's AdamW layout (fused flavour: the step count is a tensor on the device)
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                ps.append(p)
                gs.append(g)
                ms.append(state["exp_avg"])
                vs.append(state["exp_avg_sq"])
                ts.append(state["step"])
                copy = self.copies.get(p)
                from_copy = copy is not None and g is copy.grad
                cs.append(copy)
                # the copy's gradient is laid out as the copy; a master's own gradient as the master
                flips.append(from_copy and p in self.transposed)
                if copy is not None and not from_copy and p in self.transposed:
                    cs[-1] = None
                    stale.append(p)
            if not ps:
                continue
            torch._foreach_add_(ts, 1.0)
            lr = self.lr_override if self.lr_override is not None else group["lr"]
            adamw_step(ps, gs, ms, vs, ts, lr=lr, betas=tuple(group["betas"]),
                       eps=group["eps"], weight_decay=group["weight_decay"], grad_scale=self.grad_scale, shadows=cs,
                       transposed=flips)
        for p in stale:
            self.copies[p].copy_(p.t())

    def clip_and_step(self, max_norm: float) -> torch.Tensor:
        """Clip to `max_norm` inside the update (the kernel divides each gradient by max(1, norm / max_norm));
        returns the total gradient norm before clipping."""
        norm = total_norm(self.gradients())
        self.grad_scale = torch.clamp(norm / max_norm, min=1.0).float() if math.isfinite(max_norm) else None
        try:
            self.step()
        finally:
            self.grad_scale = None
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
