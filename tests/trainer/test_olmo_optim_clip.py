"""Clipping folded into the fused AdamW step equals clip_grad_norm_ followed by the step."""

from __future__ import annotations

import pytest
import torch

from olmo.optim.optimizer import clip_and_step


@pytest.mark.parametrize("max_norm", [0.05, 1e6])  # clipping active / inactive
def test_fused_grad_scale_clip_equals_clip_grad_norm(max_norm: float) -> None:
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    ours = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
    ours.load_state_dict(ref.state_dict())
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1, fused=True)
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-2, weight_decay=0.1, fused=True)
    x = torch.randn(64, 16)
    for _ in range(3):
        for model in (ref, ours):
            model.zero_grad()
            model(x).pow(2).mean().backward()
        norm_ref = torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        opt_ref.step()
        norm_ours = clip_and_step(ours, opt_ours, max_norm)
        torch.testing.assert_close(norm_ours, norm_ref)
    for a, b in zip(ref.parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert getattr(opt_ours, "grad_scale", None) is None  # never left behind for a later step


def test_unfused_optimizer_takes_the_plain_path() -> None:
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=False)
    model(torch.randn(2, 4)).sum().backward()
    norm = clip_and_step(model, opt, 1e-3)
    assert norm > 1e-3
