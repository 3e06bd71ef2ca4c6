"""`precision: fp8` (olmo/nn/float8.py): what is converted, that the numbers stay close to bf16, that checkpoints
stay interchangeable, and that a machine that cannot run it is told so in one line before anything is built.

The float8 path runs for real here: torch implements float8 matmuls (`torch._scaled_mm`) on the CPU too, so the
same torchao float8 matmul that runs on an H100 runs in these tests, only slower. Tolerances: a float8 forward of
the micro model differs from bf16 by about 1% of the loss (e4m3 keeps 3 mantissa bits); the gradient directions
agree to a cosine of about 0.99. A conversion that silently did nothing gives a difference of exactly 0, which the
tests refuse; a wrong scale or a transposed weight gives losses off by far more than 5%.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from olmo import checkpoint
from olmo.config import TrainConfig, validate
from olmo.model import Transformer, build_model
from olmo.nn import float8
from olmo.train import train

if float8.software_problem() is not None:  # pragma: no cover - install.sh adds torchao next to torch
    pytest.skip(f"float8 not usable here: {float8.software_problem()}", allow_module_level=True)

PROJECTIONS = ("w_q", "w_k", "w_v", "w_out", "w1", "w2", "w3")


@pytest.fixture(autouse=True)
def emulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run refuses fp8 on a CPU (no float8 tensor cores); these tests ask for the emulation to run the float8
    path anyway (the test that the refusal holds clears it)."""
    monkeypatch.setenv(float8.EMULATION, "1")


def _model(micro: Callable[..., TrainConfig], tmp_path: Path) -> Transformer:
    cfg = micro(tmp_path, tmp_path / "run")
    return build_model(cfg.model, torch.device("cpu"), seed=3)


def test_converts_the_seven_projections_of_every_block_and_nothing_else(
        micro: Callable[..., TrainConfig], tmp_path: Path) -> None:
    model = _model(micro, tmp_path)
    keys = {k: v.clone() for k, v in model.state_dict().items()}
    assert float8.apply_float8(model) == 7 * len(model.blocks)
    converted = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if getattr(m, "float8", None)}
    assert converted == set(PROJECTIONS)
    assert type(model.lm_head.w_out) is nn.Linear and type(model.embeddings) is nn.Embedding
    assert getattr(model.lm_head.w_out, "float8", None) is None
    # the same parameters under the same names: a bf16 checkpoint loads as it is, and nothing was re-initialised
    after = model.state_dict()
    assert after.keys() == keys.keys()
    assert all(torch.equal(after[k], keys[k]) for k in keys)
    assert float8.is_float8(model)


def _loss_and_grads(model: Transformer, ids: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = model(ids, labels=labels)
    loss.backward()
    return float(loss.detach()), [p.grad.float().flatten() for p in model.parameters() if p.grad is not None]


def test_float8_numbers_stay_close_to_bf16(micro: Callable[..., TrainConfig], tmp_path: Path) -> None:
    ref, fp8 = _model(micro, tmp_path), _model(micro, tmp_path)
    float8.apply_float8(fp8)
    ids = torch.randint(0, 766, (4, 64), generator=torch.Generator().manual_seed(0))
    loss_ref, g_ref = _loss_and_grads(ref, ids)
    loss_fp8, g_fp8 = _loss_and_grads(fp8, ids)
    assert loss_fp8 != loss_ref  # the float8 GEMMs ran (a no-op conversion gives the bf16 loss bit for bit)
    assert abs(loss_fp8 - loss_ref) / loss_ref < 0.05, (loss_ref, loss_fp8)
    cos = torch.cosine_similarity(torch.cat(g_ref), torch.cat(g_fp8), dim=0)
    assert cos > 0.95, float(cos)


def test_fp8_run_trains_and_its_checkpoint_loads_into_bf16(
        tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    bf16 = micro(tiny_data, tmp_path / "bf16", steps=6)
    bf16.precision = "bf16"
    fp8 = micro(tiny_data, tmp_path / "fp8", steps=6)
    fp8.precision = "fp8"
    ref, got = train(bf16), train(fp8)
    assert got.losses[-1] < got.losses[0] - 0.3  # it learns
    for a, b in zip(ref.losses, got.losses, strict=True):  # and follows the bf16 curve (same data, same init)
        assert abs(a - b) < 0.05 * a, (ref.losses, got.losses)
    assert ref.losses != got.losses
    ckpt = checkpoint.latest(tmp_path / "fp8")
    assert ckpt is not None
    plain = build_model(bf16.model, torch.device("cpu"), seed=0)
    before = plain.blocks["0"].attention.w_q.weight.clone()
    checkpoint.load(ckpt, plain, None)  # a plain bf16 model: same names and shapes
    assert not torch.equal(plain.blocks["0"].attention.w_q.weight, before)
    ids = torch.randint(0, 766, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        loss, _, _ = plain(ids, labels=ids)
    assert torch.isfinite(loss)


def test_fused_projections_multiply_in_float8_too(micro: Callable[..., TrainConfig], tmp_path: Path) -> None:
    """The fused q/k/v and gate/up paths multiply the concatenated weights in float8 (one cast of the shared input,
    one GEMM): close to the separate float8 projections (their scales cover the concatenation instead of each
    weight, so not bit for bit) and as far from bf16 as float8 is, which a fused path that fell back to a bf16
    matmul would not be."""
    cfg = micro(tmp_path, tmp_path / "run")
    cfg.precision, cfg.model.fuse_projections = "fp8", True
    validate(cfg)  # the combination is allowed
    ids = torch.randint(0, 766, (4, 64), generator=torch.Generator().manual_seed(0))
    bf16, split, fused = (build_model(cfg.model, torch.device("cpu"), seed=3) for _ in range(3))
    for m in (split, fused):
        float8.apply_float8(m)
    for block in split.blocks.values():
        block.attention.fused_qkv, block.feed_forward.fused = False, False
    for block in fused.blocks.values():
        assert block.attention.fused_qkv and block.feed_forward.fused
    bf16.blocks.apply(lambda m: setattr(m, "fused", False) if hasattr(m, "fused") else None)
    loss_bf16, g_bf16 = _loss_and_grads(bf16, ids)
    loss_split, g_split = _loss_and_grads(split, ids)
    loss_fused, g_fused = _loss_and_grads(fused, ids)
    assert loss_fused != loss_bf16 and loss_fused != loss_split  # float8, with its own (shared) scales
    assert abs(loss_fused - loss_split) < abs(loss_split - loss_bf16) + 0.01 * loss_split, \
        (loss_bf16, loss_split, loss_fused)
    assert abs(loss_fused - loss_split) / loss_split < 0.01
    def cos(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return float(torch.cosine_similarity(torch.cat(a), torch.cat(b), dim=0))

    # measured here: bf16 vs split 0.985, bf16 vs fused 0.982, split vs fused 0.979 (each float8 rounding apart)
    assert cos(g_bf16, g_fused) > 0.95 and abs(cos(g_bf16, g_fused) - cos(g_bf16, g_split)) < 0.02
    assert cos(g_split, g_fused) > 0.95
    assert [g.shape for g in g_fused] == [g.shape for g in g_split]  # every weight got its own gradient


def test_a_gpu_without_float8_tensor_cores_is_told_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    why = float8.problem(torch.device("cuda", 0))
    assert why is not None and "A100" in why and "8.0" in why and "precision bf16" in why and "\n" not in why
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert float8.problem(torch.device("cuda", 0)) is None


def test_missing_torchao_is_one_line_exit_2(cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch,
                                            tiny_data: Path, tmp_path: Path,
                                            micro: Callable[..., TrainConfig]) -> None:
    from olmo.recipe import to_yaml

    def no_torchao() -> object:
        raise ImportError("No module named 'torchao'")

    monkeypatch.setattr(float8, "_import_float8", no_torchao)
    cfg = micro(tiny_data, tmp_path / "run")
    cfg.precision = "fp8"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(to_yaml(cfg))
    code, out, err = cli("train", str(recipe), "--skip-doctor")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "torchao" in lines[0] and "Traceback" not in err + out
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("step*"))


@pytest.mark.parametrize("how", ["recipe", "smoke"])
def test_fp8_on_a_cpu_is_refused_in_one_line(how: str, cli: Callable[..., tuple[int, str, str]],
                                             monkeypatch: pytest.MonkeyPatch, tiny_data: Path, tmp_path: Path,
                                             micro: Callable[..., TrainConfig]) -> None:
    """The README promises fp8 only on float8 tensor cores: a CPU run with it trained (torch emulates float8
    matmuls there, slower than fp32). Refused where the run starts, for a recipe and for the smoke run."""
    import olmo.cli.gate
    from olmo.recipe import to_yaml

    monkeypatch.delenv(float8.EMULATION)
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    cfg = micro(tiny_data, tmp_path / "run")
    cfg.precision = "fp8"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(to_yaml(cfg))
    argv = (["train", str(recipe)] if how == "recipe" else
            ["train", "--smoke", "--keep", str(tmp_path / "keep"), "--set", "precision=fp8"]) + ["--device", "cpu"]
    code, out, err = cli(*argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "float8 tensor cores" in lines[0] and "on cpu" in lines[0], err
    assert "Traceback" not in err + out and not (tmp_path / "run").exists()
    assert not list(tmp_path.rglob("step*"))


def _swap(model: Transformer) -> Transformer:
    """torchao's own module swap (Float8Linear, as OLMo-core applies it), over the same convertible projections."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    convert_to_float8_training(model.blocks, config=Float8LinearConfig(), module_filter_fn=float8.convertible)
    assert sum(type(m).__name__ == "Float8Linear" for m in model.modules()) == 7 * len(model.blocks)
    return model


def _step(model: Transformer, ids: torch.Tensor) -> float:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = model(ids, labels=ids)
    loss.backward()
    return float(loss.detach())


def test_float8_projections_compute_what_the_module_swap_computes(micro: Callable[..., TrainConfig],
                                                                   tmp_path: Path) -> None:
    """The projections call torchao's float8 matmul as its Float8Linear does: loss and every gradient are the
    swap's, bit for bit (a wrong config, a transposed weight or a missed autocast cast would not be)."""
    cfg = micro(tmp_path, tmp_path / "run")
    swap, mine = _swap(build_model(cfg.model, torch.device("cpu"), seed=3)), build_model(cfg.model,
                                                                                          torch.device("cpu"), seed=3)
    float8.apply_float8(mine)
    ids = torch.randint(0, 766, (2, 64), generator=torch.Generator().manual_seed(1))
    assert _step(swap, ids) == _step(mine, ids)
    for (name, p), q in zip(swap.named_parameters(), mine.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad), name


def test_float8_casts_the_bf16_copies(micro: Callable[..., TrainConfig], tmp_path: Path) -> None:
    """With the optimizer's bf16 copies, the float8 projections cast the copy (not the fp32 master) and leave their
    weight gradient in bf16 on it: no fp32 weight gradient is written, which is the memory traffic this saves.
    What that computes is exactly the module swap over bf16 weights, i.e. what torchao's float8 does under FSDP2
    with bf16 parameters (OLMo-core's and torchtitan's multi-GPU float8): same loss, same gradients. Against the
    swap over the fp32 master the e4m3 values differ where the bf16 rounding (or the amax it shifts) crosses an
    e4m3 rounding point, float8's own noise: the curves stay close and both train."""
    from olmo.config import OptimConfig
    from olmo.optim.mixed_precision import MasterAdamW
    from olmo.optim.optimizer import build_optimizer, clip_and_step

    cfg = micro(tmp_path, tmp_path / "run")
    mine = build_model(cfg.model, torch.device("cpu"), seed=3)
    assert float8.apply_float8(mine) == 7 * len(mine.blocks)
    ocfg = OptimConfig(lr=1e-2, fused=False)
    opt = build_optimizer(mine, ocfg, torch.device("cpu"), copies_dtype=torch.bfloat16)
    assert isinstance(opt, MasterAdamW) and len(opt.copies) == 7 * len(mine.blocks)
    rounded = build_model(cfg.model, torch.device("cpu"), seed=3)
    with torch.no_grad():
        for p in rounded.blocks.parameters():
            if p.dim() == 2:  # the projections: the values their bf16 copies hold
                p.copy_(p.to(torch.bfloat16).float())
    rounded = _swap(rounded)
    ids = torch.randint(0, 766, (2, 64), generator=torch.Generator().manual_seed(1))
    assert _step(mine, ids) == _step(rounded, ids)
    assert all(c.grad is not None and c.grad.dtype == torch.bfloat16 for c in opt.copies.values())
    assert all(p.grad is None for p in opt.copies)  # no fp32 weight gradient was written
    for (name, p), q in zip(rounded.named_parameters(), mine.parameters(), strict=True):
        g = opt._grad(q)
        assert p.grad is not None and g is not None and torch.equal(p.grad, g.float()), name
    opt.zero_grad(set_to_none=True)

    swap = _swap(build_model(cfg.model, torch.device("cpu"), seed=3))
    swap_opt = build_optimizer(swap, ocfg, torch.device("cpu"))
    ids = torch.randint(0, 766, (2, 64), generator=torch.Generator().manual_seed(2))  # one batch, learned
    curves: list[list[float]] = [[], []]
    for _ in range(6):
        for curve, model, o in ((curves[0], swap, swap_opt), (curves[1], mine, opt)):
            curve.append(_step(model, ids))
            clip_and_step(model, o, 0.5)
            o.zero_grad(set_to_none=True)
    # measured here: 6.64 -> 4.55 over six steps for both, at most 0.04 apart (float8's rounding noise on a micro
    # model; a cast of the wrong tensor or a lost gradient would drift far more, or stop the learning)
    assert max(abs(a - b) for a, b in zip(*curves, strict=True)) < 0.01 * curves[0][0], curves
    assert curves[1][-1] < curves[1][0] - 0.05 and curves[0][-1] < curves[0][0] - 0.05, curves
