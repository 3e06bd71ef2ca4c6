"""Attention backends: one small function per kernel, registered by name and picked by `model.attn_backend`.

Every backend takes q (B, T, H, D) and k, v (B, T, H_kv, D) with H a multiple of H_kv, and an optional sliding
window W meaning "each query sees itself and the W-1 tokens before it" (OLMo-core's convention: its flash-attn
`window_size` is (W-1, 0), and Hugging Face's `sliding_window` is W). They return (B, T, H, D).

    sdpa          torch.nn.functional.scaled_dot_product_attention (torch picks flash / cuDNN / efficient / math)
    flash_attn    flash_attn.flash_attn_func (flash-attn 2, CUDA, bf16/fp16), when installed
    flash_attn_3  flash_attn_interface.flash_attn_func (FlashAttention-3, Hopper), when installed
    xformers      xformers.ops.memory_efficient_attention, causal only (no sliding windows), when installed
    flex          torch.nn.attention.flex_attention with a cached causal + sliding-window block mask
                  (olmo/nn/attention_flex.py); nothing to build
    eager         plain softmax(q k^T) v in fp32: the readable reference the tests compare the others against

A backend is a function plus an `unavailable()` check that returns why it cannot run here (or None), and whether
it handles sliding windows. On CUDA, `sdpa` hands sliding-window layers to flex (an explicit mask would turn
SDPA's flash kernel off and compute the full T x T). Adding one is one more `register` call;
`model.attn_backend: auto` (olmo/nn/attention_choice.py) times the available ones and keeps the fastest correct one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from olmo.errors import ConfigError
from olmo.nn import attention_flex

AttnFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "int | None"], torch.Tensor]


@dataclass(frozen=True)
class Backend:
    name: str
    fn: AttnFn
    unavailable: Callable[[torch.device], str | None]  # None when it can run on this device, else the reason
    windows: bool = True  # handles sliding-window layers (OLMo 3)
    # per-shape set-up to do outside compiled code, called with (seq_len, window, device); None: nothing
    prepare: Callable[[int, int | None, torch.device], None] | None = None


BACKENDS: dict[str, Backend] = {}


def register(name: str, unavailable: Callable[[torch.device], str | None] = lambda d: None, windows: bool = True,
             prepare: Callable[[int, int | None, torch.device], None] | None = None) -> Callable[[AttnFn], AttnFn]:
    def deco(fn: AttnFn) -> AttnFn:
        BACKENDS[name] = Backend(name, fn, unavailable, windows, prepare)
        return fn

    return deco


def get_backend(name: str, device: torch.device, windowed: bool = False) -> Backend:
    """The backend called `name`, or a ConfigError saying why it cannot be used on `device` (for a model with
    sliding-window layers when `windowed`)."""
    if name not in BACKENDS:
        raise ConfigError(f"model.attn_backend '{name}' is not one of: {', '.join(BACKENDS)}")
    why = BACKENDS[name].unavailable(device)
    if why:
        raise ConfigError(f"model.attn_backend '{name}' cannot run here: {why}; use model.attn_backend=sdpa")
    if windowed and not BACKENDS[name].windows:
        raise ConfigError(f"model.attn_backend '{name}' has no sliding-window support and this model has "
                          "sliding-window layers; use model.attn_backend=auto, sdpa or flash_attn")
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


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    t = q.shape[1]
    if window is not None and window >= t:
        window = None
    if window is not None and _flex_windows(q.device):  # an explicit mask would keep SDPA off its flash path
        return attention_flex.flex(q, k, v, window)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    if window is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:  # the CPU, or a torch without FlexAttention: the masked (full T x T) path
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(t, window, q.device))
    return out.transpose(1, 2)


_FLEX_OK: dict[str, bool] = {}  # device type -> FlexAttention usable (filled eagerly; compiled code only reads it)


def _flex_windows(device: torch.device) -> bool:
    """Whether sdpa hands sliding-window layers to FlexAttention on this device: on CUDA when flex works there."""
    if device.type != "cuda":
        return False
    if device.type not in _FLEX_OK:
        _FLEX_OK[device.type] = attention_flex.flex_unavailable(device) is None
    return _FLEX_OK[device.type]


def _prepare_sdpa(t: int, window: int | None, device: torch.device) -> None:
    if window is not None and window < t and _flex_windows(device):
        attention_flex.prepare(t, window, device)


register("sdpa", prepare=_prepare_sdpa)(sdpa)


def prepare(name: str, t: int, windows: set[int | None], device: torch.device) -> None:
    """Per-shape set-up of backend `name` for sequences of t tokens and these layer windows, done where nothing
    is compiled (the model's forward) so compiled blocks find it ready. "auto" not yet resolved means sdpa."""
    backend = BACKENDS.get("sdpa" if name == "auto" else name)
    if backend is not None and backend.prepare is not None:
        for w in windows:
            backend.prepare(t, w, device)


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


def _importable(module: str, what: str, build: str) -> str | None:
    try:
        __import__(module)
    except Exception as e:  # a broken build raises more than ImportError
        return f"{what} does not import ({type(e).__name__}: {e}); {build}"
    return None


def _flash3_unavailable(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "FlashAttention-3 needs a CUDA device"
    if torch.cuda.get_device_capability(device)[0] != 9:
        return "FlashAttention-3 runs on Hopper GPUs (compute capability 9.x) only"
    return _importable("flash_attn_interface", "flash_attn_3",
                       "build it with `olmo-doctor build-kernels --package flash-attn-3 --source PATH`")


@register("flash_attn_3", unavailable=_flash3_unavailable)
def flash_attn_3(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    import flash_attn_interface

    win = (-1, -1) if window is None else (window - 1, 0)
    out = flash_attn_interface.flash_attn_func(q, k, v, causal=True, window_size=win)
    return out[0] if isinstance(out, tuple) else out  # some FA3 versions also return the log-sum-exp


def _xformers_unavailable(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "xformers' memory-efficient attention needs a CUDA device here"
    return _importable("xformers.ops", "xformers", "build it with `olmo-doctor build-kernels --package xformers`")


@register("xformers", unavailable=_xformers_unavailable, windows=False)
def xformers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    import xformers.ops as xops

    if window is not None and window < q.shape[1]:
        raise RuntimeError("the xformers backend has no sliding-window support")
    rep = q.shape[2] // k.shape[2]  # grouped-query attention: repeat the kv heads (layout B, T, H, D)
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    out: torch.Tensor = xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())
    return out


register("flex", unavailable=attention_flex.flex_unavailable, prepare=attention_flex.prepare)(attention_flex.flex)
