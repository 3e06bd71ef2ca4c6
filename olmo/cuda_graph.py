"""A whole training step (forward, backward, gradient clip, optimizer) recorded once and replayed as a CUDA graph.

Replaying a graph launches the step's ~1,000 kernels with one call, so the GPU never waits for Python, the
autograd engine or torch.compile's guards between them. The recipe is PyTorch's "whole network capture"
(docs: CUDA semantics, CUDA Graphs): run a few warm-up steps on a side stream (torch.compile compiles, the
optimizer creates its state, cuBLAS/cuDNN pick their kernels), drop the gradients, record one step into the graph
(backward allocates the `.grad` tensors inside the graph's memory pool, and every replay rewrites those same
tensors, so gradients are never zeroed between replays), then per step copy the new batch into the static input
and replay. Requirements the caller keeps: an optimizer that reads its learning rate from a CUDA tensor
(olmo.optim.mixed_precision.MasterAdamW.lr_override, set with `fill_`), no host synchronisation inside the step, fixed
input shapes.

Recording does not run the step; `GraphedStep.__call__` always replays, so the first call is a real step too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class CaptureFailed(RuntimeError):
    """Recording the step failed (an operation in it cannot be captured); the gradients were dropped, so the
    caller can run the step eagerly instead."""


class GraphedStep:
    """`step(*inputs) -> outputs` (tensors) captured on first call after `warmup` eager calls on a side stream.

    The warm-up calls are real steps (they update the model): the caller passes them the first batches.
    Outputs are the graph's static tensors, overwritten by the next call: read or clone them before then."""

    def __init__(self, step: Callable[..., tuple[torch.Tensor, ...]], zero_grad: Callable[[], None],
                 device: torch.device, warmup: int = 3):
        self.step, self.zero_grad, self.device, self.warmup_left = step, zero_grad, device, warmup
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_in: tuple[torch.Tensor, ...] = ()
        self.static_out: tuple[torch.Tensor, ...] = ()
        self.side = torch.cuda.Stream()

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.warmup_left > 0:
            self.warmup_left -= 1
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                self.zero_grad()
                out = self.step(*inputs)
            torch.cuda.current_stream().wait_stream(self.side)
            return out
        if self.graph is None:
            self._capture(inputs)
        assert self.graph is not None
        for static, new in zip(self.static_in, inputs, strict=True):
            static.copy_(new, non_blocking=True)
        self.graph.replay()
        return self.static_out

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> None:
        torch.cuda.synchronize()
        self.static_in = tuple(t.to(self.device, copy=True) for t in inputs)
        self.zero_grad()  # backward inside the graph allocates the gradients in the graph's pool
        graph = torch.cuda.CUDAGraph()
        try:
            # thread_local: a data-loader thread pinning memory meanwhile does not break the capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.static_out = self.step(*self.static_in)
        except RuntimeError as e:
            self.zero_grad()
            raise CaptureFailed(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
        self.graph = graph
