"""`model.attn_backend = "auto"`: pick the fastest attention backend that is numerically right for this model's
shapes on this GPU, and say why.

"flash-attn installed" must not mean "flash-attn used": on an H200, torch SDPA (cuDNN kernels) runs the OLMo-2-1B
attention fwd+bwd in 2.09 ms against flash-attn 2's 3.44 ms (build-kernels' GPU check). So on CUDA every available
backend is timed (forward + backward, bf16, the model's batch/sequence/head shapes), checked against SDPA (relative
error below REL_ERROR_BOUND), and the fastest correct one wins. The answer is cached per (GPU, torch, backends'
versions, shapes) in the user cache, and a result recorded by `olmo-doctor build-kernels` for the same GPU and
torch decides without timing when it exists. On the CPU the answer is SDPA without timing.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from olmo.config import ModelConfig
from olmo.nn.attention import BACKENDS, AttnFn

REL_ERROR_BOUND = 2e-2  # bf16: two correct kernels differ by ~2e-3, a wrong one by ~1
CANDIDATES = ("sdpa", "flex", "flash_attn", "flash_attn_3", "xformers")  # "eager" is the reference, never the fast path


# build-kernels records results by package name; the trainer's backends by module-style name
RECORDED_NAMES = {"flash-attn": "flash_attn", "flash-attn-3": "flash_attn_3", "xformers": "xformers"}


@dataclass(frozen=True)
class Choice:
    backend: str
    reason: str
    timings_ms: dict[str, float]


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


def _time_fwd_bwd(fn: AttnFn, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None,
                  iters: int = 10, warmup: int = 3) -> tuple[float, torch.Tensor]:
    """Median ms of forward + backward, and the forward output (for the correctness check)."""
    out = fn(q, k, v, window)
    out.backward(torch.ones_like(out))
    for _ in range(warmup - 1):  # first-call set-up (kernel loading, cuDNN plans) must not count
        fn(q, k, v, window).backward(torch.ones_like(out))
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        o = fn(q, k, v, window)
        o.backward(torch.ones_like(o))
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), out.detach()


def candidates(cfg: ModelConfig, device: torch.device, names: tuple[str, ...] = CANDIDATES) -> list[str]:
    """The backends that can run this model here: installed, usable on this device, and (for a model with
    sliding-window layers) able to run those layers too."""
    return [n for n in names if n in BACKENDS and BACKENDS[n].unavailable(device) is None
            and (BACKENDS[n].windows or not cfg.windowed)]


def measure(cfg: ModelConfig, batch: int, seq: int, device: torch.device,
            names: tuple[str, ...] = CANDIDATES) -> dict[str, tuple[float, float]]:
    """{backend: (ms per layer, weighted over the model's windowed and full layers; relative error vs sdpa on the
    most common kind of layer)} for every candidate that can run here."""
    runnable = candidates(cfg, device, names)
    gen = torch.Generator(device=device).manual_seed(0)
    head_dim = cfg.effective_head_dim
    shape_q, shape_kv = (batch, seq, cfg.n_heads, head_dim), (batch, seq, cfg.effective_n_kv_heads, head_dim)
    q = torch.randn(shape_q, device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    k = torch.randn(shape_kv, device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    v = torch.randn(shape_kv, device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    # a model's time is its layers' mix: OLMo 3 has 3 windowed layers for every full one, and a backend can win
    # one kind and lose the other (on an H200 flex beats flash-attn 2 on windows but trails cuDNN SDPA on full
    # layers), so each kind of layer is timed and weighted by how many layers it has
    kinds = Counter(cfg.window(layer) for layer in range(cfg.n_layers))
    main = kinds.most_common(1)[0][0]
    results: dict[str, tuple[float, torch.Tensor]] = {}
    for name in runnable:
        try:
            timed = {w: _time_fwd_bwd(BACKENDS[name].fn, q, k, v, w) for w in kinds}
        except RuntimeError:  # a kernel that refuses these shapes is simply not a candidate
            continue
        ms = sum(count * timed[w][0] for w, count in kinds.items()) / cfg.n_layers
        results[name] = (ms, timed[main][1])
    ref = results.get("sdpa", next(iter(results.values()), (0.0, None)))[1]
    return {n: (ms, _relative_error(out, ref) if ref is not None else 0.0) for n, (ms, out) in results.items()}


def decide(measured: dict[str, tuple[float, float]]) -> Choice:
    """The fastest backend whose error is within bound; SDPA when nothing else qualifies."""
    ok = {n: ms for n, (ms, err) in measured.items() if err <= REL_ERROR_BOUND}
    timings = {n: round(ms, 3) for n, (ms, _) in measured.items()}
    if not ok:
        return Choice("sdpa", "no backend could be timed here; SDPA is the safe default", timings)
    best = min(ok, key=ok.__getitem__)
    rejected = [n for n in measured if n not in ok]
    why = ", ".join(f"{n} {ms:.2f} ms" for n, ms in sorted(ok.items(), key=lambda kv: kv[1]))
    if rejected:
        why += f"; rejected as numerically wrong: {', '.join(rejected)}"
    return Choice(best, f"fastest fwd+bwd here ({why})", timings)


def _cache_key(cfg: ModelConfig, batch: int, seq: int, device: torch.device) -> str:
    from importlib.metadata import PackageNotFoundError, version

    def installed(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "-"

    parts = [torch.cuda.get_device_name(device), torch.__version__,
             *(installed(d) for d in ("flash-attn", "flash_attn_3", "xformers")), str(batch), str(seq),
             str(cfg.n_heads), str(cfg.effective_n_kv_heads), str(cfg.effective_head_dim), str(cfg.sliding_window)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _recorded_by_build_kernels(device: torch.device) -> str | None:
    """What `olmo-doctor build-kernels` measured for this GPU and torch, when olmo-doctor has a record."""
    from olmo.cli.gate import kernels_measured_backend  # the one module that asks olmo-doctor

    winner = kernels_measured_backend(torch.cuda.get_device_name(device), torch.__version__)
    return RECORDED_NAMES.get(winner) if winner not in (None, "sdpa") else None


def choose(cfg: ModelConfig, batch: int, seq: int, device: torch.device,
           measure_fn: Callable[..., dict[str, tuple[float, float]]] = measure) -> Choice:
    if device.type != "cuda":
        return Choice("sdpa", "CPU: torch SDPA", {})
    from olmo.cache import cache_root, read_json, write_json

    # beside olmo-doctor build-kernels' own timings (one cache folder per machine for kernel choices)
    cache = cache_root("olmo-doctor") / "attention-choice" / f"{_cache_key(cfg, batch, seq, device)}.json"
    cached = read_json(cache)
    if isinstance(cached, dict) and cached.get("backend") in BACKENDS:
        return Choice(cached["backend"], f"{cached['reason']} (cached)", cached.get("timings_ms", {}))
    recorded = _recorded_by_build_kernels(device)
    if recorded and candidates(cfg, device, (recorded,)):
        choice = Choice(recorded, "faster than SDPA in olmo-doctor build-kernels' GPU check", {})
    else:
        choice = decide(measure_fn(cfg, batch, seq, device))
    write_json(cache, {"backend": choice.backend, "reason": choice.reason, "timings_ms": choice.timings_ms})
    return choice


def backend_choice_line(choice: Choice) -> str:
    """The log line naming the chosen backend and why it was chosen."""
    return f"attention backend {choice.backend}: {choice.reason}"
