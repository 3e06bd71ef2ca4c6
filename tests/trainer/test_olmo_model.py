"""The model: OLMo-core parameter names, the reordered-norm block, QK-norm, RoPE, attention backends, init, loss."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch

from olmo.config import ConfigError, ModelConfig
from olmo.model import Block, RMSNorm, Transformer, apply_rope, build_model, lm_loss, rope_tables
from olmo.nn.attention import BACKENDS, eager, get_backend, sdpa

CPU = torch.device("cpu")


def _small(**kw: object) -> ModelConfig:
    base = {"d_model": 32, "n_layers": 2, "n_heads": 4, "mlp_hidden": 64, "vocab_size": 50, "max_seq_len": 64}
    return ModelConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_parameter_names_are_olmo_core_names() -> None:
    model = build_model(_small(n_kv_heads=2), CPU, 0)
    block = {
        "attention.w_q.weight": (32, 32), "attention.w_k.weight": (16, 32), "attention.w_v.weight": (16, 32),
        "attention.w_out.weight": (32, 32), "attention.q_norm.weight": (32,), "attention.k_norm.weight": (16,),
        "attention_norm.weight": (32,), "feed_forward.w1.weight": (64, 32), "feed_forward.w2.weight": (32, 64),
        "feed_forward.w3.weight": (64, 32), "feed_forward_norm.weight": (32,),
    }
    want = {"embeddings.weight": (50, 32), "lm_head.norm.weight": (32,), "lm_head.w_out.weight": (50, 32)}
    want |= {f"blocks.{i}.{k}": v for i in range(2) for k, v in block.items()}
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == want  # no biases, no tied head, no RoPE buffers in the checkpoint
    assert sum(p.numel() for p in model.parameters()) == model.cfg.num_params()


def test_block_is_reordered_norm() -> None:
    """h = x + norm(attn(x)); out = h + norm(mlp(h)): zeroing both norm scales makes the block the identity."""
    model = build_model(_small(), CPU, 0)
    block = cast(Block, model.blocks["0"])
    x = torch.randn(2, 8, 32)
    cos, sin = model.rope(8, CPU)
    with torch.no_grad():
        block.attention_norm.weight.zero_()
        block.feed_forward_norm.weight.zero_()
        assert torch.equal(block(x, cos, sin), x)
        block.feed_forward_norm.weight.fill_(1.0)
        ff = block.feed_forward(x)
        expect = x + ff * torch.rsqrt(ff.pow(2).mean(-1, keepdim=True) + 1e-6)
        assert torch.allclose(block(x, cos, sin), expect, atol=1e-5)


def test_qk_norm_is_over_the_full_projection_before_rope() -> None:
    model = build_model(_small(), CPU, 0)
    attn = cast(Block, model.blocks["0"]).attention
    x = torch.randn(1, 5, 32)
    q = attn.w_q(x)
    normed = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)  # one norm over all heads, not per head
    assert attn.q_norm is not None
    assert torch.allclose(attn.q_norm(q), normed * attn.q_norm.weight, atol=1e-6)


def test_rope_rotates_half_with_theta_500k() -> None:
    cos, sin = rope_tables(8, 4, 500_000.0, CPU)
    inv = 1.0 / 500_000.0 ** (torch.arange(0, 8, 2).float() / 8)
    assert torch.allclose(cos[3, :4], torch.cos(3 * inv)) and torch.allclose(cos[3, 4:], torch.cos(3 * inv))
    x = torch.randn(1, 4, 2, 8)
    out = apply_rope(x, cos, sin)
    assert torch.allclose(out[:, 0], x[:, 0])  # position 0 is not rotated
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps lengths
    # relative: <rope(q, m), rope(k, n)> depends only on m - n
    q, k = torch.randn(8), torch.randn(8)
    big_cos, big_sin = rope_tables(8, 12, 500_000.0, CPU)

    def dot(m: int, n: int) -> float:
        rq = apply_rope(q.view(1, 1, 1, 8), big_cos[m:m + 1], big_sin[m:m + 1])
        rk = apply_rope(k.view(1, 1, 1, 8), big_cos[n:n + 1], big_sin[n:n + 1])
        return float((rq * rk).sum())

    assert math.isclose(dot(5, 2), dot(10, 7), rel_tol=1e-4)


@pytest.mark.parametrize(("window", "kv"), [(None, 4), (3, 4), (None, 2), (5, 1)])
def test_sdpa_matches_eager_reference(window: int | None, kv: int) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 9, 4, 8, generator=g)
    k, v = torch.randn(2, 9, kv, 8, generator=g), torch.randn(2, 9, kv, 8, generator=g)
    assert torch.allclose(sdpa(q, k, v, window), eager(q, k, v, window), atol=1e-5)


def test_sliding_window_and_causality() -> None:
    """Layer output at position t depends on tokens t-W+1..t only (W includes t, OLMo-core's convention)."""
    q, k, v = (torch.randn(1, 10, 2, 4) for _ in range(3))
    base = sdpa(q, k, v, 3)
    k2, v2 = k.clone(), v.clone()
    k2[:, 6], v2[:, 6] = 5.0, 5.0  # perturb token 6
    out = sdpa(q, k2, v2, 3)
    changed = [t for t in range(10) if not torch.allclose(out[:, t], base[:, t])]
    assert changed == [6, 7, 8]


def test_backends_registry() -> None:
    assert {"sdpa", "eager", "flash_attn"} <= set(BACKENDS)
    assert get_backend("sdpa", CPU).name == "sdpa"
    with pytest.raises(ConfigError, match="flash_attn' cannot run here: flash-attn needs a CUDA device"):
        get_backend("flash_attn", CPU)


def test_olmo3_model_uses_windows_per_layer() -> None:
    cfg = _small(n_layers=4, sliding_window=[4, 4, 4, -1])
    model = Transformer(cfg)
    assert [cast(Block, b).attention.window for b in model.blocks.values()] == [4, 4, 4, None]


def test_init_is_truncated_normal_and_seeded() -> None:
    cfg = _small(d_model=256, mlp_hidden=512, vocab_size=1000)
    a, b = build_model(cfg, CPU, 7), build_model(cfg, CPU, 7)
    w = cast(Block, a.blocks["1"]).feed_forward.w1.weight.detach()
    assert abs(float(w.std()) - 0.02 * 0.986) < 0.001  # std of N(0, 0.02) truncated at 3 sigma
    assert float(w.abs().max()) <= 0.06
    assert torch.equal(a.embeddings.weight, b.embeddings.weight)
    assert not torch.equal(a.embeddings.weight, build_model(cfg, CPU, 8).embeddings.weight)
    assert all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in a.modules() if isinstance(m, RMSNorm))


def test_loss_and_z_loss() -> None:
    logits = torch.randn(2, 5, 50)
    labels = torch.randint(0, 50, (2, 5))
    labels[:, -1] = -100
    total, ce, z = lm_loss(logits, labels, 1e-4)
    keep = labels != -100
    lse = logits.logsumexp(-1)[keep]
    want_ce = (lse - logits.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)[keep]).mean()
    assert torch.allclose(ce, want_ce, atol=1e-5)
    assert z is not None and torch.allclose(z, 1e-4 * lse.pow(2).mean(), atol=1e-7)
    assert torch.allclose(total, ce + z)
    assert lm_loss(logits, labels, 0.0)[2] is None


def test_causal_lm_forward() -> None:
    model = build_model(_small(), CPU, 0)
    ids = torch.randint(0, 50, (2, 12))
    logits = model(ids)
    assert logits.shape == (2, 12, 50)
    ids2 = ids.clone()
    ids2[:, 8:] = (ids2[:, 8:] + 1) % 50
    assert torch.allclose(model(ids2)[:, :8], logits[:, :8], atol=1e-5)  # the future never leaks back
