"""GPU-only checks (run on the GPU machine: `pytest -m gpu tests/olmo`): the smoke run on CUDA with bf16
autocast and fused AdamW, and flash-attn agreeing with SDPA when it is installed."""

from __future__ import annotations

import pytest
import torch

from olmo.attention import BACKENDS

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_smoke_on_gpu() -> None:
    from olmo.smoke import run_smoke

    res = run_smoke(device="cuda", steps=20)
    assert res.device.startswith("cuda") and res.loss_fell, res.verdict()
    assert res.tokens_per_s > 0


@pytest.mark.parametrize("window", [None, 64])
def test_flash_attn_matches_sdpa(window: int | None) -> None:
    device = torch.device("cuda")
    if BACKENDS["flash_attn"].unavailable(device):
        pytest.skip("flash-attn is not installed")
    g = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(2, 256, 8, 64, device=device, dtype=torch.bfloat16, generator=g)
    k = torch.randn(2, 256, 4, 64, device=device, dtype=torch.bfloat16, generator=g)
    v = torch.randn(2, 256, 4, 64, device=device, dtype=torch.bfloat16, generator=g)
    fa = BACKENDS["flash_attn"].fn(q, k, v, window)
    ref = BACKENDS["sdpa"].fn(q, k, v, window)
    assert (fa.float() - ref.float()).abs().max().item() < 2e-2


def test_lm_head_gradient_accumulates_in_fp32_inside_the_gemm() -> None:
    """The chunked loss sums the (V, d) weight gradient with addmm(out_dtype=fp32) on CUDA: equal to the fp32
    sum of the bf16 products, and the result stays fp32."""
    from olmo.loss import _accumulate_fp32

    g = torch.Generator(device="cuda").manual_seed(0)
    parts = [(torch.randn(512, 256, device="cuda", generator=g).bfloat16(),
              torch.randn(256, 128, device="cuda", generator=g).bfloat16()) for _ in range(3)]
    acc = None
    for a, b in parts:
        acc = _accumulate_fp32(acc, a, b)
    ref = sum(a.float() @ b.float() for a, b in parts)
    assert acc is not None and acc.dtype == torch.float32
    assert (acc - ref).abs().max().item() < 1e-3 * ref.abs().max().item()
