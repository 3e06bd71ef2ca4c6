"""GPU-only checks (run on the GPU machine: `pytest -m gpu tests/trainer`): the smoke run on CUDA with bf16
autocast and fused AdamW, and each kernel backend (flash-attn 2/3, xformers) agreeing with SDPA when installed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import gpu_marks

from olmo.config import TrainConfig
from olmo.nn.attention import BACKENDS

pytestmark = gpu_marks()


def test_smoke_on_gpu() -> None:
    from olmo.smoke import run_smoke

    res = run_smoke(device="cuda", steps=20)
    assert res.device.startswith("cuda") and res.loss_fell, res.verdict()
    assert res.tokens_per_s > 0


@pytest.mark.parametrize("name", ["flex", "flash_attn", "flash_attn_3", "xformers"])
@pytest.mark.parametrize("window", [None, 64])
def test_kernel_backends_match_sdpa(name: str, window: int | None) -> None:
    device = torch.device("cuda")
    if BACKENDS[name].unavailable(device):
        pytest.skip(f"{name}: {BACKENDS[name].unavailable(device)}")
    if window is not None and not BACKENDS[name].windows:
        pytest.skip(f"{name} has no sliding-window support")
    g = torch.Generator(device=device).manual_seed(0)  # head dim 128: what `build-kernels --subset olmo` keeps
    q = torch.randn(2, 256, 8, 128, device=device, dtype=torch.bfloat16, generator=g)
    k = torch.randn(2, 256, 4, 128, device=device, dtype=torch.bfloat16, generator=g)
    v = torch.randn(2, 256, 4, 128, device=device, dtype=torch.bfloat16, generator=g)
    fa = BACKENDS[name].fn(q, k, v, window)
    ref = BACKENDS["sdpa"].fn(q, k, v, window)
    assert (fa.float() - ref.float()).abs().max().item() < 2e-2


def test_lm_head_gradient_accumulates_in_fp32_inside_the_gemm() -> None:
    """The chunked loss sums the (V, d) weight gradient with addmm(out_dtype=fp32) on CUDA: equal to the fp32
    sum of the bf16 products, and the result stays fp32."""
    from olmo.nn.loss import _accumulate_fp32

    g = torch.Generator(device="cuda").manual_seed(0)
    parts = [(torch.randn(512, 256, device="cuda", generator=g).bfloat16(),
              torch.randn(256, 128, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    acc = None
    for a, b in parts:
        acc = _accumulate_fp32(acc, a, b)
    ref = torch.stack([a.float() @ b.float() for a, b in parts]).sum(0)
    assert acc is not None and acc.dtype == torch.float32
    assert (acc - ref).abs().max().item() < 1e-3 * ref.abs().max().item()


@pytest.mark.parametrize("compiled", [False, True])
def test_cuda_graph_step_trains_like_the_eager_step(tiny_data: Path, tmp_path: Path, compiled: bool,
                                                    micro: Callable[..., TrainConfig]) -> None:
    """cuda_graph replays the whole step (forward, backward, clip, the copies' AdamW) as one graph after 3 eager
    warm-up steps; the loss curve matches the eager step's (bf16 on a GPU: to ~1e-2, not bit for bit)."""
    from olmo.optim.mixed_precision import MasterAdamW
    from olmo.train import setup, train, train_step

    losses = {}
    for graph in (False, True):
        cfg = micro(tiny_data, tmp_path / f"g{graph}", steps=12)
        cfg.device, cfg.compile, cfg.cuda_graph, cfg.model.attn_backend = "cuda", compiled, graph, "sdpa"
        cfg.eval_interval = 0
        res = train(cfg, console=None)
        losses[graph] = res.losses
    assert len(losses[True]) == 12
    assert max(abs(a - b) for a, b in zip(losses[False], losses[True], strict=True)) < 2e-2
    cfg = micro(tiny_data, tmp_path / "probe", steps=5)
    cfg.device, cfg.cuda_graph, cfg.model.attn_backend = "cuda", True, "sdpa"
    state = setup(cfg, resume=False, say=lambda *_: None)
    assert isinstance(state.optimizer, MasterAdamW) and state.graph is not None
    for _ in range(5):
        train_step(state, state.loader.next_batch(), 1e-3)
    assert state.graph.graph is not None  # recorded after the warm-up steps, then replayed


@pytest.mark.parametrize("fused", [False, True], ids=["projections", "fused-projections"])
def test_fp8_compiled_and_graphed_follows_bf16(tiny_data: Path, tmp_path: Path,
                                               micro: Callable[..., TrainConfig], fused: bool) -> None:
    """precision fp8 on a GPU with float8 tensor cores, as the fast recipes run it (compiled blocks, the step as a
    CUDA graph, the float8 casts reading the optimizer's bf16 copies; with and without the fused q/k/v and
    gate/up projections): the float8 GEMMs run (the curve is not bf16's bit for bit) and follow bf16's within
    5%."""
    from olmo.nn import float8
    from olmo.train import train

    if float8.problem(torch.device("cuda")) is not None:
        pytest.skip(float8.problem(torch.device("cuda")) or "")
    losses = {}
    for precision in ("bf16", "fp8"):
        cfg = micro(tiny_data, tmp_path / precision, steps=12)
        cfg.device, cfg.compile, cfg.cuda_graph, cfg.model.attn_backend = "cuda", True, True, "sdpa"
        cfg.precision, cfg.eval_interval, cfg.model.fuse_projections = precision, 0, fused
        losses[precision] = train(cfg, console=None).losses
    assert losses["fp8"] != losses["bf16"]
    assert losses["fp8"][-1] < losses["fp8"][0] - 0.5
    assert max(abs(a - b) / a for a, b in zip(losses["bf16"], losses["fp8"], strict=True)) < 0.05
