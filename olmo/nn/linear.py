"""The projection layer of the blocks: nn.Linear (no bias) that can multiply by a low-precision copy of its weight.

Under bf16 autocast, `F.linear(x, w_fp32)` casts the whole weight to bf16 on every call and, in backward, converts
the bf16 weight gradient back to fp32: two passes over every weight per step that move ~7 GB on a 1B model. When
the optimizer keeps a bf16 copy of the weight (olmo/optim/mixed_precision.py), `Linear` multiplies by that copy and
its gradient stays in bf16 for the optimizer to read, which gives the same numbers with neither pass. Anywhere
else (no copy, autocast off, another autocast dtype) it is plain nn.Linear. The parameter is still `weight`, so
names, state dicts and checkpoints do not change.

With `precision: fp8` (olmo/nn/float8.py) the module's `float8` recipe multiplies instead of F.linear, by the same
weight. `project` multiplies by several projections' weights at once (the fused q/k/v and gate/up paths).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


class Linear(nn.Linear):
    compute_weight: torch.Tensor | None = None  # set by olmo.optim.mixed_precision.attach_compute_copies
    float8: Any = None  # an olmo.nn.float8.Float8Recipe, set by apply_float8 (precision: fp8)

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features, bias=False)

    def active_weight(self, x: torch.Tensor) -> torch.Tensor:
        """The weight a call on `x` multiplies by: the copy when autocast computes in its dtype, else `weight`."""
        copy = self.compute_weight
        if copy is not None and torch.is_autocast_enabled(x.device.type) and \
                torch.get_autocast_dtype(x.device.type) == copy.dtype:
            return copy
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.float8 is not None:
            out: torch.Tensor = self.float8.matmul(x, self.active_weight(x))
            return out
        return F.linear(x, self.active_weight(x))


def project(x: torch.Tensor, modules: Sequence[Linear]) -> torch.Tensor:
    """x multiplied by the concatenation of `modules`' weights (one GEMM), each module's output a slice of the
    last dimension, in module order; in float8 when the modules are (they are converted together)."""
    weight = torch.cat([m.active_weight(x) for m in modules])
    recipe = modules[0].float8
    if recipe is not None:
        out: torch.Tensor = recipe.matmul(x, weight)
        return out
    return F.linear(x, weight)
