"""The `flex` attention backend: torch.nn.attention.flex_attention with a causal + sliding-window block mask.

With SDPA a sliding window becomes an explicit boolean (T, T) mask, which turns SDPA's flash kernel off and
computes every score; FlexAttention instead skips the key blocks a mask rules out, so an OLMo 3 layer with a
window of 4096 over 8192 tokens does about half the work of a full causal one, and nothing has to be built.

The block mask depends only on (sequence length, window, device), so it is made once per shape, cached, and
reused by every layer and step. `prepare` builds it ahead of the compiled blocks (the model calls it from its
uncompiled forward), so a compiled block reads a ready mask instead of tracing its construction. On CUDA the
kernel is `torch.compile`d (flex_attention eagerly is a slow reference; inside an already compiled block the
block's compile covers it). On the CPU it runs eagerly and forward only (torch has no flex backward there),
which is what the CPU tests check against the fp32 reference; `auto` never picks it there.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

_BLOCK_MASKS: dict[tuple[int, int | None, str], Any] = {}


def flex_unavailable(device: torch.device) -> str | None:
    """None when FlexAttention can train on `device`, else why not (on the CPU it has no backward)."""
    if device.type != "cuda":
        return "FlexAttention trains on CUDA devices only (torch has no flex backward on the CPU)"
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError as e:
        return f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention ({e})"
    try:
        import triton  # noqa: F401  (the compiled flex kernel is generated as Triton code)
    except ImportError:
        return "FlexAttention on CUDA needs Triton, which does not import here"
    return None


def _mask_mod(window: int | None) -> Any:
    """Query i may see key j when j <= i (causal) and, with a window W, i - j < W (itself and W-1 before it)."""
    if window is None:
        def causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return q_idx >= kv_idx
        return causal

    def sliding(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    return sliding


def block_mask(t: int, window: int | None, device: torch.device) -> Any:
    """The BlockMask for length t and window (None or >= t: plain causal), made once per shape and device."""
    if window is not None and window >= t:
        window = None
    key = (t, window, str(device))
    mask = _BLOCK_MASKS.get(key)
    if mask is None:
        from torch.nn.attention.flex_attention import create_block_mask

        mask = create_block_mask(_mask_mod(window), B=None, H=None, Q_LEN=t, KV_LEN=t, device=device)
        _BLOCK_MASKS[key] = mask
    return mask


def prepare(t: int, window: int | None, device: torch.device) -> None:
    """Make the block mask now, outside any compiled region (the model's forward calls this per layer shape)."""
    block_mask(t, window, device)


@cache
def _compiled() -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    # dynamic=False: one kernel per shape, as the block mask is per shape anyway
    return torch.compile(flex_attention, dynamic=False)


def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    """q (B, T, H, D), k/v (B, T, H_kv, D) -> (B, T, H, D); grouped-query attention without copying k and v."""
    from torch.nn.attention.flex_attention import flex_attention

    mask = block_mask(q.shape[1], window, q.device)
    fn = _compiled() if q.device.type == "cuda" and not torch.compiler.is_compiling() else flex_attention
    out = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask,
             enable_gqa=q.shape[2] != k.shape[2])
    assert isinstance(out, torch.Tensor)
    return out.transpose(1, 2)
