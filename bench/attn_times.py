"""Attention fwd+bwd time of every backend on the OLMo 2 1B and OLMo 3 7B shapes, and what `auto` picks; one GPU.

    python3 bench/attn_times.py [--json FILE]

Shapes (bf16, head dim 128, causal): OLMo 2 1B batch 4 x 4096, 16 heads; OLMo 3 7B batch 1 x 8192, 32 heads,
once with its sliding window of 4096 (3 of every 4 layers) and once full (every 4th layer). Backends: the trainer's
(olmo.nn.attention: sdpa, flex, flash_attn, flash_attn_3, xformers; a backend that is not installed or cannot run a
shape is left out with the reason) plus `sdpa-masked`, SDPA with the explicit boolean window mask that `sdpa` used
before it handed windows to flex. Each is checked against the fp32 reference (olmo.nn.attention.eager) on the output
and the three input gradients (relative Frobenius error; bf16 kernels land near 3e-3) before it is timed: median
of 20 fwd+bwd after warm-up, with CUDA events, fresh random inputs per shape. `auto` is the trainer's own choice
(olmo.nn.attention_choice.measure + decide) for the model config of each shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from olmo.config import ModelConfig
from olmo.nn.attention import BACKENDS, window_mask
from olmo.nn.attention_choice import decide, measure

SHAPES = {  # name: (batch, seq, heads, kv heads, window)
    "olmo2_1b": (4, 4096, 16, 16, None),
    "olmo3_7b_window": (1, 8192, 32, 32, 4096),
    "olmo3_7b_full": (1, 8192, 32, 32, None),
}
NAMES = ("sdpa", "sdpa-masked", "flex", "flash_attn", "flash_attn_3", "xformers")


def sdpa_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None) -> torch.Tensor:
    """The old fallback: an explicit (T, T) mask, which keeps SDPA off its flash kernels."""
    t = q.shape[1]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask = window_mask(t, window or t, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1]
                                          ).transpose(1, 2)


def _fn(name: str) -> Any:
    return sdpa_masked if name == "sdpa-masked" else BACKENDS[name].fn


def _why_not(name: str, window: int | None, dev: torch.device) -> str | None:
    if name == "sdpa-masked":
        return None if window is not None else "the masked path exists only for sliding windows"
    why = BACKENDS[name].unavailable(dev)
    if why is None and window is not None and not BACKENDS[name].windows:
        why = "no sliding-window support"
    return why


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def _outputs(fn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
             window: int | None) -> list[torch.Tensor]:
    out = fn(q, k, v, window)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g.to(out.dtype))
    return [out.detach(), dq, dk, dv]


def _time(fn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, window: int | None,
          iters: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        torch.autograd.grad(fn(q, k, v, window), (q, k, v), g)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.autograd.grad(fn(q, k, v, window), (q, k, v), g)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def run_shape(name: str, dev: torch.device) -> dict[str, Any]:
    b, t, h, kv, window = SHAPES[name]
    gen = torch.Generator(device=dev).manual_seed(len(name))
    q, k, v = (torch.randn(b, t, n, 128, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_()
               for n in (h, kv, kv))
    g = torch.randn(b, t, h, 128, device=dev, dtype=torch.bfloat16, generator=gen)
    ref = _outputs(BACKENDS["eager"].fn, q, k, v, g, window)  # fp32 scores and softmax
    rows: dict[str, Any] = {}
    for backend in NAMES:
        why = _why_not(backend, window, dev)
        if why:
            rows[backend] = {"skipped": why}
            continue
        try:
            got = _outputs(_fn(backend), q, k, v, g, window)
            err = max(_rel(a, r) for a, r in zip(got, ref, strict=True))
            rows[backend] = {"max_rel_error": round(err, 5), "ms": round(_time(_fn(backend), q, k, v, g, window), 3)}
        except Exception as e:  # a kernel that refuses the shape is reported, not fatal
            rows[backend] = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        torch.cuda.synchronize()
    del ref
    torch.cuda.empty_cache()
    return {"shape": dict(batch=b, seq=t, heads=h, kv_heads=kv, head_dim=128, window=window), "backends": rows}


def auto_picks(dev: torch.device) -> dict[str, Any]:
    """What `attn_backend: auto` picks, by its own measurement, for the 1B (batch 4 x 4096) and OLMo 3 7B
    (batch 1 x 8192) configs."""
    out = {}
    for name, cfg, batch, seq in (("olmo2_1b", ModelConfig.olmo2_like(2048, 16, 16), 4, 4096),
                                  ("olmo3_7b", ModelConfig.olmo3_7b(), 1, 8192)):
        choice = decide(measure(cfg, batch, seq, dev))
        out[name] = {"backend": choice.backend, "reason": choice.reason}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("attn_times: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    res: dict[str, Any] = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "shapes": {}}
    for name in args.shapes.split(","):
        res["shapes"][name] = run_shape(name, dev)
    res["auto"] = auto_picks(dev)
    print(json.dumps(res))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
