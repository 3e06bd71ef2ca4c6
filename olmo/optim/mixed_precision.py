"""fp32 master weights with bf16 compute, without casting: bf16 copies of the block weights, kept by the optimizer.

On one GPU the trainer computes under bf16 autocast with fp32 parameters (as OLMo-core does). Autocast re-casts
every weight to bf16 on every forward, and the bf16 weight gradients are converted to fp32 for the optimizer. Here
each projection weight of the blocks (`olmo.nn.linear.Linear`, 1.2B of olmo2_1B's 1.6B parameters) gets a bf16 copy
that the forward multiplies by; backward leaves the gradient in bf16 on the copy; `MasterAdamW` reads that
gradient, updates the fp32 master weight and its AdamW state as torch's AdamW does, and rewrites the copy, all in
one pass per tensor (olmo/optim/fused_adamw.py). The numbers are the ones autocast gives: autocast multiplies by
the same bf16 rounding of the master weight, and its fp32 gradient is the bf16 GEMM output converted.

The master weights stay the model's parameters and the AdamW state stays torch's (`exp_avg`, `exp_avg_sq`,
`step` per parameter), so state dicts and checkpoints are unchanged and interchangeable with runs without copies.
Loading a state dict into the model refreshes the copies. Only for one process: DDP and FSDP2 hook the
parameters' own gradients (FSDP2 keeps its own bf16 copies through MixedPrecisionPolicy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn as nn

from olmo.nn.linear import Linear
from olmo.optim.fused_adamw import adamw_step


def attach_compute_copies(model: nn.Module, dtype: torch.dtype) -> dict[torch.Tensor, torch.Tensor]:
    """Give every `Linear` of `model` a `dtype` copy of its weight (a leaf that collects the gradient); returns
    {master parameter: copy}. The copies are refreshed whenever a state dict is loaded into `model`."""
    copies: dict[torch.Tensor, torch.Tensor] = {}
    for module in model.modules():
        if isinstance(module, Linear):
            module.compute_weight = module.weight.detach().to(dtype).requires_grad_(True)
            copies[module.weight] = module.compute_weight

    def refresh(_module: nn.Module, _keys: Any) -> None:
        refresh_copies(copies)

    model.register_load_state_dict_post_hook(refresh)
    return copies


@torch.no_grad()
def refresh_copies(copies: dict[torch.Tensor, torch.Tensor]) -> None:
    for master, copy in copies.items():
        copy.copy_(master)


class MasterAdamW(torch.optim.AdamW):
    """torch.optim.AdamW's parameter groups, state and state dict, stepped by `olmo.optim.fused_adamw`: a parameter
    with a copy takes its gradient from the copy and rewrites the copy; the others are updated as usual."""

    def __init__(self, params: Iterable[Any], copies: dict[torch.Tensor, torch.Tensor], lr: float,
                 betas: tuple[float, float], eps: float, weight_decay: float):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False)
        self.copies = copies
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
        for group in self.param_groups:
            ps, gs, ms, vs, ts, cs = [], [], [], [], [], []
            for p in group["params"]:
                g = self._grad(p)
                if g is None:
                    continue
                state = self.state[p]
                if not state:  # torch's AdamW layout (fused flavour: the step count is a tensor on the device)
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                elif state["step"].device != p.device:  # a state dict from a non-fused AdamW keeps it on the CPU
                    state["step"] = state["step"].to(device=p.device, dtype=torch.float32)
                ps.append(p)
                gs.append(g)
                ms.append(state["exp_avg"])
                vs.append(state["exp_avg_sq"])
                ts.append(state["step"])
                cs.append(self.copies.get(p))
            if not ps:
                continue
            torch._foreach_add_(ts, 1.0)
            lr = self.lr_override if self.lr_override is not None else group["lr"]
            adamw_step(ps, gs, ms, vs, ts, lr=lr, betas=tuple(group["betas"]),
                       eps=group["eps"], weight_decay=group["weight_decay"], grad_scale=self.grad_scale, shadows=cs)
