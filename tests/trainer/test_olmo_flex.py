"""The `flex` backend (FlexAttention with a cached causal + sliding-window block mask): the same function as the
fp32 reference on the CPU (forward; torch has no flex backward there), one block mask per shape, set up by the
model's forward before the blocks run, a candidate of `auto` on CUDA only, and fwd + bwd against SDPA on a GPU."""

from __future__ import annotations

import pytest
import torch

from olmo.config import ConfigError, ModelConfig
from olmo.nn import attention_flex
from olmo.nn.attention import BACKENDS, eager, get_backend, sdpa
from olmo.nn.attention_choice import CANDIDATES, candidates

CPU = torch.device("cpu")


def _qkv(b: int, t: int, h: int, kv: int, d: int, device: torch.device = CPU, dtype: torch.dtype = torch.float32,
         seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(b, t, h, d, generator=g, device=device, dtype=dtype),
            torch.randn(b, t, kv, d, generator=g, device=device, dtype=dtype),
            torch.randn(b, t, kv, d, generator=g, device=device, dtype=dtype))


# lengths that are and are not multiples of flex's 128-token blocks; windows inside one block, across blocks,
# and longer than the sequence (= plain causal); grouped-query and multi-query heads
@pytest.mark.parametrize(("t", "h", "kv", "window"), [(128, 4, 2, 32), (200, 4, 4, None), (300, 4, 1, 130),
                                                      (64, 2, 2, 100), (257, 2, 1, 1)])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager on purpose: numerics
def test_flex_matches_the_fp32_reference_on_cpu(t: int, h: int, kv: int, window: int | None) -> None:
    q, k, v = _qkv(2, t, h, kv, 16, seed=t)
    out = BACKENDS["flex"].fn(q, k, v, window)
    ref = eager(q, k, v, window)
    assert out.shape == ref.shape == (2, t, h, 16)
    assert (out - ref).abs().max().item() < 1e-4
    # and SDPA's masked path computes the same function (the fallback flex replaces on CUDA)
    assert (sdpa(q, k, v, window) - ref).abs().max().item() < 1e-4


def test_flex_window_is_olmo_cores_convention() -> None:
    """W counts the query itself: with W=3, output t depends on tokens t-2..t only."""
    q, k, v = _qkv(1, 140, 2, 2, 8)
    base = BACKENDS["flex"].fn(q, k, v, 3)
    k2, v2 = k.clone(), v.clone()
    k2[:, 130], v2[:, 130] = 5.0, 5.0  # in the second 128-token block
    out = BACKENDS["flex"].fn(q, k2, v2, 3)
    changed = [i for i in range(140) if not torch.allclose(out[:, i], base[:, i])]
    assert changed == [130, 131, 132]


def test_block_mask_is_made_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention_flex, "_BLOCK_MASKS", {})
    a = attention_flex.block_mask(256, 64, CPU)
    assert attention_flex.block_mask(256, 64, CPU) is a
    assert attention_flex.block_mask(256, 128, CPU) is not a
    assert attention_flex.block_mask(256, 999, CPU) is attention_flex.block_mask(256, None, CPU)  # W >= T: causal
    assert len(attention_flex._BLOCK_MASKS) == 3


def test_model_forward_prepares_masks_before_the_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo.model import build_model

    monkeypatch.setattr(attention_flex, "_BLOCK_MASKS", {})
    cfg = ModelConfig(d_model=32, n_layers=4, n_heads=2, mlp_hidden=64, vocab_size=64, max_seq_len=160,
                      sliding_window=[16, 16, 16, -1], attn_backend="flex")
    tokens = torch.randint(0, 64, (1, 160), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = build_model(cfg, CPU, seed=0)(tokens)
    assert set(attention_flex._BLOCK_MASKS) == {(160, 16, "cpu"), (160, None, "cpu")}
    cfg.attn_backend = "sdpa"
    with torch.no_grad():
        ref = build_model(cfg, CPU, seed=0)(tokens)
    assert isinstance(logits, torch.Tensor) and isinstance(ref, torch.Tensor)
    assert (logits - ref).abs().max().item() < 1e-4


def test_flex_is_an_auto_candidate_on_cuda_only() -> None:
    assert "flex" in CANDIDATES
    assert BACKENDS["flex"].windows
    assert "CUDA" in (BACKENDS["flex"].unavailable(CPU) or "")
    assert candidates(ModelConfig(sliding_window=[4, -1]), CPU) == ["sdpa"]
    with pytest.raises(ConfigError, match="flex' cannot run here"):
        get_backend("flex", CPU, windowed=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("window", [None, 256])
def test_flex_fwd_bwd_matches_sdpa_on_gpu(window: int | None) -> None:
    dev = torch.device("cuda")
    q, k, v = (x.requires_grad_() for x in _qkv(2, 1024, 8, 4, 128, dev, torch.bfloat16))
    grads = []
    for fn in (BACKENDS["flex"].fn, BACKENDS["eager"].fn):
        out = fn(q, k, v, window).to(torch.bfloat16)
        dq, dk, dv = torch.autograd.grad(out.float().square().sum(), (q, k, v))
        grads.append((out.detach(), dq, dk, dv))
    for a, b in zip(*grads, strict=True):
        rel = ((a.float() - b.float()).norm() / b.float().norm()).item()
        assert rel < 2e-2, rel
