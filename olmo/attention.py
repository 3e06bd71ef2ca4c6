"""Attention backends: one small function per kernel, registered by name and picked by `model.attn_backend`.

Every backend takes q (B, T, H, D) and k, v (B, T, H_kv, D) with H a multiple of H_kv, and an optional sliding
window W meaning "each query sees itself and the W-1 tokens before it" (OLMo-core's convention: its flash-attn
`window_size` is (W-1, 0), and Hugging Face's `sliding_window` is W). They return (B, T, H, D).

    sdpa        torch.nn.functional.scaled_dot_product_attention (torch picks flash / cuDNN / efficient / math)
    flash_attn  flash_attn.flash_attn_func (flash-attn 2, CUDA, bf16/fp16), when installed
    eager       plain softmax(q k^T) v in fp32: the readable reference the tests compare the others against

A backend is a function plus an `unavailable()` check that returns why it cannot run here (or None). Adding one
(xformers, flash-attn 3, a timed "auto" choice) is one more `register` call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

AttnFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "int | None"], torch.Tensor]


@dataclass(frozen=True)
class Backend:
    name: str
    fn: AttnFn
    unavailable: Callable[[torch.device], str | None]  # None when it can run on this device, else the reason


BACKENDS: dict[str, Backend] = {}


def register(name: str, unavailable: Callable[[torch.device], str | None] = lambda d: None
             ) -> Callable[[AttnFn], AttnFn]:
    def deco(fn: AttnFn) -> AttnFn:
        BACKENDS[name] = Backend(name, fn, unavailable)
        return fn

    return deco


def get_backend(name: str, device: torch.device) -> Backend:
    """The backend called `name`, or a ConfigError saying why it cannot be used on `device`."""
    from olmo.config import ConfigError

    if name not in BACKENDS:
        raise ConfigError(f"model.attn_backend '{name}' is not one of: {', '.join(BACKENDS)}")
    why = BACKENDS[name].unavailable(device)
    if why:
        raise ConfigError(f"model.attn_backend '{name}' cannot run here: {why}; use model.attn_backend=sdpa")
    return BACKENDS[name]


_MASKS: dict[tuple[int, int, str], torch.Tensor] = {}


def window_mask(t: int, window: int, device: torch.device) -> torch.Tensor:
    """Boolean (T, T) mask, True where query i may attend key j: i - window < j <= i. Cached per shape."""
    key = (t, window, str(device))
    if key not in _MASKS:
        i = torch.arange(t, device=device)
        diff = i[:, None] - i[None, :]
        _MASKS[key] = (diff >= 0) & (diff < window)
    return _MASKS[key]


def _expand_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, H_kv, T, D) -> (B, H, T, D) for grouped-query attention."""
    rep = n_heads // x.shape[1]
    return x if rep == 1 else x.repeat_interleave(rep, dim=1)


@register("sdpa")
def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    t = q.shape[2]
    if window is None or window >= t:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # an explicit mask keeps SDPA off its flash path; the flash_attn backend handles windows natively
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(t, window, q.device))
    return out.transpose(1, 2)


@register("eager")
def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    q, k, v = q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float()
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    t = q.shape[2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    allowed = window_mask(t, window if window is not None else t, q.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2)


def _flash_unavailable(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "flash-attn needs a CUDA device"
    try:
        import flash_attn  # noqa: F401
    except Exception as e:  # a broken build raises more than ImportError (OLMo-core PR #283)
        return f"flash_attn does not import ({type(e).__name__}: {e}); build it with `olmo-doctor build-kernels`"
    return None


@register("flash_attn", unavailable=_flash_unavailable)
def flash_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    from flash_attn import flash_attn_func

    win = (-1, -1) if window is None else (window - 1, 0)
    out: torch.Tensor = flash_attn_func(q, k, v, causal=True, window_size=win)
    return out
