"""GPU check of a freshly installed attention kernel against torch SDPA; prints one JSON object.

Self-contained (imports only torch and the package under test) so it runs under whichever interpreter the
kernels were installed into: `python gpucheck.py flash-attn [--subset-dims 128] [--shape B,T,H,D]`.
Correctness: forward output and the three input gradients on random bf16 inputs, causal, compared with
`torch.nn.functional.scaled_dot_product_attention` by relative Frobenius error, bound REL_ERROR_BOUND (bf16
has 8 mantissa bits; two correct kernels differ by ~2e-3, a wrong one by ~1). Speed: median fwd+bwd of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

REL_ERROR_BOUND = 2e-2


def _rel(a: Any, b: Any) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm().clamp_min(1e-12))


def _time_ms(fn: Any, device: str = "cuda", iters: int = 20, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device == "cpu":  # the harness's own CPU test
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _inputs(shape: tuple[int, int, int, int], device: str = "cuda") -> tuple[Any, ...]:
    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn(shape, device=device, dtype=torch.bfloat16)


def _sdpa(q: Any, k: Any, v: Any, causal: bool = True, mask: Any = None) -> Any:
    import torch.nn.functional as F

    # kernels take (batch, seq, heads, dim); SDPA takes (batch, heads, seq, dim)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        is_causal=causal and mask is None,
    )
    return out.transpose(1, 2)


def _compare(kernel: Any, shape: tuple[int, int, int, int], device: str = "cuda", timed: bool = True
             ) -> dict[str, Any]:
    q, k, v, g = _inputs(shape, device)
    errors: dict[str, float] = {}
    outs = []
    for fn in (kernel, _sdpa):
        q.grad = k.grad = v.grad = None
        out = fn(q, k, v)
        out.backward(g)
        outs.append((out.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone()))
    for name, a, b in zip(("out", "dq", "dk", "dv"), outs[0], outs[1], strict=True):
        errors[name] = _rel(a, b)

    def step(fn: Any) -> Any:
        return lambda: fn(q, k, v).backward(g)

    if not timed:
        return {"rel_errors": errors, "max_rel_error": max(errors.values())}
    return {
        "rel_errors": errors,
        "max_rel_error": max(errors.values()),
        "kernel_ms": _time_ms(step(kernel), device),
        "sdpa_ms": _time_ms(step(_sdpa), device),
    }


def _flash(package: str) -> tuple[Any, str]:
    """flash_attn_func and the installed version for FlashAttention-2 or -3."""
    from importlib.metadata import version

    if package == "flash-attn-3":
        import flash_attn_interface as fa3

        def fa3_func(*args: Any, **kw: Any) -> Any:
            out = fa3.flash_attn_func(*args, **kw)
            return out[0] if isinstance(out, tuple) else out  # older FA3 returned (out, lse)

        return fa3_func, version("flash_attn_3")
    from flash_attn import flash_attn_func

    return flash_attn_func, version("flash-attn")


# The secondary checks' shapes, (batch, seq) with the main check's heads and head dim
LOCAL_BT, LOCAL_WINDOW = (1, 1024), 256  # sliding window: each query sees itself and 256 keys before it
UNEVEN_BT = (2, 1000)  # not a multiple of any tile: the bounds-checked kernels


def _window_mask(t: int, window: int) -> Any:
    import torch

    i = torch.arange(t, device="cuda")
    return (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] <= window)


def _local_part(package: str, shape: tuple[int, int, int, int]) -> dict[str, Any]:
    """Sliding-window (local) attention, which OLMo 3 uses and the subset keeps."""
    func, _ = _flash(package)
    q, k, v, _ = _inputs((*LOCAL_BT, shape[2], shape[3]))
    local = func(q, k, v, causal=True, window_size=(LOCAL_WINDOW, 0))
    reference = _sdpa(q, k, v, mask=_window_mask(LOCAL_BT[1], LOCAL_WINDOW))
    return {"local_rel_error": _rel(local.detach(), reference.detach())}


def _uneven_part(package: str, shape: tuple[int, int, int, int]) -> dict[str, Any]:
    """Sequence lengths that are not tile multiples (the kernels with bounds checks), fwd+bwd."""
    func, _ = _flash(package)
    res = _compare(lambda q, k, v: func(q, k, v, causal=True), (*UNEVEN_BT, shape[2], shape[3]), timed=False)
    return {"uneven_rel_error": res["max_rel_error"]}


def _outside_part(package: str, subset_dims: list[int]) -> dict[str, Any]:
    """A call outside the subset must raise a clear error, not crash the process."""
    import torch

    func, _ = _flash(package)
    # FlashAttention-3's switches serve smaller head dims with the kept (padded) kernel and refuse larger ones
    other = 2 * max(subset_dims) if package == "flash-attn-3" else 64 if 64 not in subset_dims else 96
    q2 = torch.randn(1, 128, 2, other, device="cuda", dtype=torch.bfloat16)
    try:
        func(q2, q2, q2)
        torch.cuda.synchronize()
        return {"outside_subset": "no error raised"}
    except RuntimeError as e:
        return {"outside_subset": str(e).splitlines()[0]}


CHECKS = {"main": "fwd+bwd against SDPA", "local": "sliding-window attention", "uneven": "uneven sequence length",
          "outside": "a head dim outside the subset"}


_STARTED = time.monotonic()
TIMINGS: dict[str, float] = {}


def _mark(check: str) -> None:
    """Say on stderr which check starts: if the kernel crashes the process, the last mark names the check
    (one process for all checks keeps verification to a single torch import and CUDA start). Also notes when
    each check started, seconds since the process began, so a slow verification shows where the time went."""
    TIMINGS[check] = round(time.monotonic() - _STARTED, 2)
    print(f"gpucheck: running {check}", file=sys.stderr, flush=True)


def _warm_up(shape: tuple[int, int, int, int]) -> None:
    """Run SDPA fwd+bwd once on every shape the checks use (CUDA context, cuDNN graphs, allocator) so that a
    check started with --wait, while the kernels still compile, has nothing left to set up but the package."""
    import torch

    h, d = shape[2], shape[3]
    for sh in (shape, (*LOCAL_BT, h, d), (*UNEVEN_BT, h, d)):
        q, k, v, g = _inputs(sh)
        _sdpa(q, k, v).backward(g)
    q, k, v, g = _inputs((*LOCAL_BT, h, d))
    _sdpa(q, k, v, mask=_window_mask(LOCAL_BT[1], LOCAL_WINDOW)).backward(g)
    torch.cuda.synchronize()


def check_flash_attn(package: str, shape: tuple[int, int, int, int], subset_dims: list[int]) -> dict[str, Any]:
    func, installed = _flash(package)
    _mark("main")
    res = _compare(lambda q, k, v: func(q, k, v, causal=True), shape)
    res["version"] = installed
    _mark("local")
    res.update(_local_part(package, shape))
    _mark("uneven")
    res.update(_uneven_part(package, shape))
    if subset_dims:
        _mark("outside")
        res.update(_outside_part(package, subset_dims))
    return res


def xformers_info(text: str) -> tuple[dict[str, str], bool]:
    """`python -m xformers.info` lines -> (build and attention fields, whether it is a CUDA build)."""
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if _}
    cuda = fields.get("build.cuda_version", "None") not in ("None", "") and "build.nvcc_version" in fields
    return {k: v for k, v in fields.items() if k.startswith(("build.", "memory_efficient_attention"))}, cuda


def check_xformers(shape: tuple[int, int, int, int]) -> dict[str, Any]:
    import xformers
    import xformers.ops as xops

    safe = "-P" if sys.version_info >= (3, 11) else "-I"  # never an xformers/ of the working folder
    info = subprocess.run([sys.executable, safe, "-m", "xformers.info"], capture_output=True, text=True)
    res = _compare(
        lambda q, k, v: xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask()), shape
    )
    res["version"] = xformers.__version__
    res["info"], res["cuda_build"] = xformers_info(info.stdout)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("package", choices=["flash-attn", "flash-attn-3", "xformers"])
    ap.add_argument("--shape", default="4,4096,16,128")
    ap.add_argument("--subset-dims", default="")
    ap.add_argument("--wait", action="store_true",
                    help="set up and warm up, then wait for a 'go' line on stdin before importing the package")
    args = ap.parse_args(argv)
    import torch

    _mark("torch imported")
    torch.cuda.init()
    _mark("cuda ready")
    b, t, h, d = (int(x) for x in args.shape.split(","))
    shape = (b, t, h, d)
    dims = [int(x) for x in args.subset_dims.split(",") if x]
    if args.wait:
        _warm_up(shape)
        _mark("ready")
        if sys.stdin.readline().strip() != "go":  # the build failed or was cancelled
            return 3
        import importlib

        importlib.invalidate_caches()  # the package was installed after this process started
        _mark("go")
    out: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "compute_capability": "{}.{}".format(*torch.cuda.get_device_capability(0)),
        "shape": dict(zip(("batch", "seq", "heads", "head_dim"), shape, strict=True)),
        "dtype": "bfloat16",
        "causal": True,
        "rel_error_bound": REL_ERROR_BOUND,
    }
    if args.package != "xformers":
        out.update(check_flash_attn(args.package, shape, dims))
    else:
        out.update(check_xformers(shape))
    _mark("done")
    out["timings_s"] = TIMINGS
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
