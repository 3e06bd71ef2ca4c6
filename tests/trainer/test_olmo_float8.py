"""`precision: fp8` (olmo/nn/float8.py): what is converted, that the numbers stay close to bf16, that checkpoints
stay interchangeable, and that a machine that cannot run it is told so in one line before anything is built.

The float8 path runs for real here: torch implements float8 matmuls (`torch._scaled_mm`) on the CPU too, so the
same torchao Float8Linear that runs on an H100 runs in these tests, only slower. Tolerances: a float8 forward of
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
from olmo.config import ConfigError, TrainConfig, validate
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
    converted = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if type(m).__name__ == "Float8Linear"}
    assert converted == set(PROJECTIONS)
    assert type(model.lm_head.w_out) is nn.Linear and type(model.embeddings) is nn.Embedding
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


def test_fp8_cannot_combine_with_fused_projections(micro: Callable[..., TrainConfig], tmp_path: Path) -> None:
    cfg = micro(tmp_path, tmp_path / "run")
    cfg.precision, cfg.model.fuse_projections = "fp8", True
    with pytest.raises(ConfigError, match=r"fuse_projections.*fp8"):
        validate(cfg)
    cfg.model.fuse_projections = False
    validate(cfg)


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
