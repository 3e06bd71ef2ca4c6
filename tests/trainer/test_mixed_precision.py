"""bf16 compute copies kept by the optimizer (olmo/optim/mixed_precision.py, olmo/optim/fused_adamw.py,
olmo/nn/linear.py).

The claim under test: training with copies gives the numbers plain bf16 autocast with fp32 AdamW gives. On the CPU
this runs the torch-ops reference of the update under CPU bf16 autocast; the Triton kernel is compared with that
reference on a GPU (marked gpu)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import requires_gpu

from olmo.config import ModelConfig, OptimConfig
from olmo.model import build_model
from olmo.optim.fused_adamw import adamw_step
from olmo.optim.mixed_precision import MasterAdamW
from olmo.optim.optimizer import build_optimizer, clip_and_step, total_norm

BETAS = (0.9, 0.95)


@pytest.mark.parametrize("grad_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [None, 2.5])
def test_update_matches_torch_adamw(grad_dtype: torch.dtype, scale: float | None) -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(300, 7, generator=g)
    mine, shadow = ref.clone(), ref.to(torch.bfloat16)
    ref.requires_grad_(True)
    opt = torch.optim.AdamW([ref], lr=3e-2, betas=BETAS, eps=1e-8, weight_decay=0.1, foreach=False)
    m, v, step = torch.zeros_like(mine), torch.zeros_like(mine), torch.zeros(())
    for _ in range(4):
        grad = torch.randn(mine.shape, generator=g).to(grad_dtype)
        ref.grad = grad.float() / (scale or 1.0)
        opt.step()
        step += 1
        adamw_step([mine], [grad], [m], [v], [step], lr=3e-2, betas=BETAS, eps=1e-8, weight_decay=0.1,
                   grad_scale=None if scale is None else torch.tensor(scale), shadows=[shadow])
    assert (mine - ref.detach()).abs().max().item() < 1e-6
    assert torch.equal(shadow, mine.to(torch.bfloat16))
    assert torch.allclose(m, opt.state[ref]["exp_avg"], atol=1e-7)


def _tiny(seed: int = 0) -> torch.nn.Module:
    cfg = ModelConfig.tiny()
    cfg.attn_backend = "sdpa"
    return build_model(cfg, torch.device("cpu"), seed=seed)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int = 4) -> list[float]:
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randint(0, 700, (2, 64), generator=g)
        labels = torch.cat([x[:, 1:], torch.full_like(x[:, :1], -100)], dim=1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _, _ = model(x, labels=labels)
        loss.backward()
        clip_and_step(model, opt, 0.5)  # small enough that clipping is active
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def test_training_with_copies_matches_plain_autocast() -> None:
    """One step from the same weights: the same loss, bit-identical gradients, updates equal to ~1 fp32 ulp. Over
    several steps those ulps flip the bf16 rounding of a few weights, so the curves agree to ~1e-3, not exactly
    (as two runs with different but equally valid summation orders would)."""
    cfg = OptimConfig(lr=1e-2, fused=False)
    plain, copied = _tiny(), _tiny()
    plain_opt = build_optimizer(plain, cfg, torch.device("cpu"))
    opt = build_optimizer(copied, cfg, torch.device("cpu"), copies_dtype=torch.bfloat16)
    assert isinstance(opt, MasterAdamW) and len(opt.copies) == 4 * 7  # 4 layers x (q, k, v, out, w1, w2, w3)
    x = torch.randint(0, 700, (2, 64), generator=torch.Generator().manual_seed(1))
    losses = []
    for model in (plain, copied):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _, _ = model(x, labels=x)
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == losses[1]
    for p, q in zip(plain.parameters(), copied.parameters(), strict=True):
        assert p.grad is not None and torch.equal(p.grad, opt._grad(q).float())  # type: ignore[union-attr]
    clip_and_step(plain, plain_opt, 0.5)
    clip_and_step(copied, opt, 0.5)
    for (name, a), b in zip(plain.state_dict().items(), copied.state_dict().values(), strict=True):
        assert (a - b).abs().max().item() <= 2e-7, name
    assert all(torch.equal(c, p.detach().to(torch.bfloat16)) for p, c in opt.copies.items())
    plain_opt.zero_grad()
    opt.zero_grad()
    later = [_train(m, o, steps=3) for m, o in ((plain, plain_opt), (copied, opt))]
    assert max(abs(a - b) for a, b in zip(*later, strict=True)) < 5e-3


def test_copies_collect_the_gradients_and_bypass_is_caught() -> None:
    model = _tiny()
    opt = build_optimizer(model, OptimConfig(fused=False), torch.device("cpu"), copies_dtype=torch.bfloat16)
    assert isinstance(opt, MasterAdamW)
    x = torch.randint(0, 700, (1, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = model(x, labels=x)
    loss.backward()
    assert all(c.grad is not None and c.grad.dtype == torch.bfloat16 for c in opt.copies.values())
    assert all(p.grad is None for p in opt.copies)  # the fp32 masters are not touched by backward
    assert len(opt.gradients()) == sum(1 for _ in model.parameters())
    opt.zero_grad()
    assert all(c.grad is None for c in opt.copies.values())
    with torch.no_grad():  # without autocast the layers use the fp32 masters (no dtype mismatch)
        assert model(x).dtype == torch.float32


def test_fused_projections_use_the_copies() -> None:
    cfg = ModelConfig.tiny()
    cfg.attn_backend, cfg.fuse_projections = "sdpa", True
    model = build_model(cfg, torch.device("cpu"), seed=0)
    opt = build_optimizer(model, OptimConfig(fused=False), torch.device("cpu"), copies_dtype=torch.bfloat16)
    x = torch.randint(0, 700, (1, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = model(x, labels=x)
    loss.backward()
    assert all(c.grad is not None for c in opt.copies.values())  # type: ignore[attr-defined]


def test_loading_weights_refreshes_the_copies_and_state_is_torch_adamw() -> None:
    model = _tiny()
    opt = build_optimizer(model, OptimConfig(lr=1e-2, fused=False), torch.device("cpu"), copies_dtype=torch.bfloat16)
    _train(model, opt, steps=1)
    other = _tiny(seed=5)
    model.load_state_dict(other.state_dict())
    assert all(torch.equal(c, p.detach().to(torch.bfloat16)) for p, c in opt.copies.items())  # type: ignore[attr-defined]
    # the optimizer state dict has torch's AdamW layout: a plain AdamW over the same groups loads it
    plain = build_optimizer(model, OptimConfig(lr=1e-2, fused=False), torch.device("cpu"))
    plain.load_state_dict(opt.state_dict())
    first = next(iter(model.parameters()))
    assert set(plain.state[first]) == {"step", "exp_avg", "exp_avg_sq"}
    assert torch.equal(plain.state[first]["exp_avg"], opt.state[first]["exp_avg"])


def test_checkpoint_resume_restores_masters_state_and_copies(tmp_path: Path) -> None:
    """olmo.checkpoint (DCP) round trip: the masters and the AdamW state come back, the copies are rewritten from
    the loaded masters, and the resumed optimizer takes the same next step as the one that never stopped."""
    from olmo import checkpoint
    cfg = OptimConfig(lr=1e-2, fused=False)
    model = _tiny()
    opt = build_optimizer(model, cfg, torch.device("cpu"), copies_dtype=torch.bfloat16)
    _train(model, opt, steps=2)
    path = checkpoint.save(tmp_path, 2, model, opt, {"note": "test"})
    resumed = _tiny(seed=9)  # other weights: the load must replace them, copies included
    ropt = build_optimizer(resumed, cfg, torch.device("cpu"), copies_dtype=torch.bfloat16)
    checkpoint.load(path, resumed, ropt)
    assert isinstance(ropt, MasterAdamW)
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert all(torch.equal(c, p.detach().to(torch.bfloat16)) for p, c in ropt.copies.items())
    first = next(iter(model.parameters()))
    assert torch.equal(opt.state[first]["exp_avg"], ropt.state[next(iter(resumed.parameters()))]["exp_avg"])
    assert _train(model, opt, steps=2) == _train(resumed, ropt, steps=2)
    # resuming the same checkpoint without copies: a torch AdamW that keeps its own implementation flags
    plain = _tiny(seed=9)
    popt = build_optimizer(plain, OptimConfig(lr=1e-2, fused=False, compute_copies=False), torch.device("cpu"))
    popt.param_groups[0]["foreach"] = True
    checkpoint.load(path, plain, popt)
    assert popt.param_groups[0]["foreach"] is True and popt.param_groups[1].get("foreach") is None


def test_total_norm_accumulates_in_fp32_across_dtypes() -> None:
    a = torch.full((1000,), 0.01, dtype=torch.bfloat16)
    b = torch.full((10,), 3.0)
    expected = (1000 * 0.01 ** 2 + 10 * 9.0) ** 0.5
    assert abs(total_norm([a, b]).item() - expected) < 1e-3 * expected


@pytest.mark.slow
def test_compiled_blocks_route_gradients_to_the_copies() -> None:
    model = _tiny()
    opt = build_optimizer(model, OptimConfig(fused=False), torch.device("cpu"), copies_dtype=torch.bfloat16)
    for block in model.blocks.values():  # type: ignore[operator]
        block.compile(backend="aot_eager")  # dynamo + AOTAutograd, as on GPU, without the C++ build
    x = torch.randint(0, 700, (1, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = model(x, labels=x)
    loss.backward()
    assert all(c.grad is not None for c in opt.copies.values())  # type: ignore[attr-defined]
    assert all(p.grad is None for p in opt.copies)  # type: ignore[attr-defined]


@requires_gpu()
def test_triton_kernel_matches_reference() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(4099,), (257, 129), (2048, 64)]
    ps = [torch.randn(s, device="cuda", generator=g) for s in shapes]
    ref_ps = [p.clone() for p in ps]
    state = [(torch.zeros_like(p), torch.zeros_like(p), torch.zeros((), device="cuda")) for p in ps]
    ref_state = [(torch.zeros_like(p), torch.zeros_like(p), torch.zeros((), device="cuda")) for p in ps]
    shadows = [p.to(torch.bfloat16) for p in ps]
    for _ in range(3):
        grads = [torch.randn(p.shape, device="cuda", generator=g).to(torch.bfloat16) for p in ps]
        scale = torch.tensor(1.7, device="cuda")
        for t in [s[2] for s in state] + [s[2] for s in ref_state]:
            t += 1
        adamw_step(ps, grads, [s[0] for s in state], [s[1] for s in state], [s[2] for s in state],
                   lr=torch.tensor(1e-2, device="cuda"), betas=BETAS, eps=1e-8, weight_decay=0.1, grad_scale=scale,
                   shadows=shadows)
        for p, gr, (m, v, t) in zip(ref_ps, grads, ref_state, strict=True):
            cpu = [x.cpu() for x in (p, gr, m, v)]
            adamw_step([cpu[0]], [cpu[1]], [cpu[2]], [cpu[3]], [t.cpu()], lr=1e-2, betas=BETAS, eps=1e-8,
                       weight_decay=0.1, grad_scale=scale.cpu())
            for dst, src in zip((p, m, v), (cpu[0], cpu[2], cpu[3]), strict=True):
                dst.copy_(src)
    for p, r, s in zip(ps, ref_ps, shadows, strict=True):
        assert (p - r).abs().max().item() < 1e-6
        assert torch.equal(s, p.to(torch.bfloat16))
