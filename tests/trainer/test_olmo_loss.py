"""The chunked loss equals the plain logits loss (value and gradients), with z-loss, ignored labels and chunks
that do not divide the token count; the model gives the same loss either way."""

from __future__ import annotations

import pytest
import torch

from olmo.config import ModelConfig
from olmo.model import build_model, lm_loss
from olmo.nn.loss import fused_linear_cross_entropy


@pytest.mark.parametrize(("z_mult", "chunk"), [(0.0, 64), (1e-4, 37), (1e-5, 1000)])
def test_fused_loss_matches_plain_loss_and_gradients(z_mult: float, chunk: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(300, 48, requires_grad=True)
    w = (torch.randn(500, 48) * 0.1).requires_grad_()
    y = torch.randint(0, 500, (300,))
    y[::7] = -100
    total, ce, z = fused_linear_cross_entropy(x, w, y, z_mult, chunk=chunk)
    (total * 0.25).backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    ref_total, ref_ce, ref_z = lm_loss((x @ w.t())[None], y[None], z_mult)
    (ref_total * 0.25).backward()
    torch.testing.assert_close(total, ref_total)
    torch.testing.assert_close(ce, ref_ce)
    assert (z is None) == (ref_z is None)
    torch.testing.assert_close(gx, x.grad, atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(gw, w.grad, atol=1e-7, rtol=1e-5)


def test_no_grad_evaluation_skips_the_gradient_work() -> None:
    x, w = torch.randn(64, 16), torch.randn(100, 16)
    y = torch.randint(0, 100, (64,))
    with torch.no_grad():
        total, ce, _ = fused_linear_cross_entropy(x, w, y, 0.0, chunk=10)
    torch.testing.assert_close(ce, lm_loss((x @ w.t())[None], y[None], 0.0)[1])
    assert not total.requires_grad


def test_model_loss_is_the_same_fused_or_not() -> None:
    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, mlp_hidden=128, vocab_size=256, max_seq_len=32)
    model = build_model(cfg, torch.device("cpu"), seed=1)
    tokens = torch.randint(0, 256, (2, 32))
    labels = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)
    fused = model(tokens, labels=labels)[0]
    fused.backward()
    g_fused = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    model.lm_head.fused_loss = False
    plain = model(tokens, labels=labels)[0]
    plain.backward()
    torch.testing.assert_close(fused, plain)
    for a, p in zip(g_fused, model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-4)
