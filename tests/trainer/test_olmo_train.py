"""The loop: exact resume, refusing to clobber a run, the doctor gate, and the smoke run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from olmo import checkpoint
from olmo.cli.main import app
from olmo.config import ConfigError, TrainConfig
from olmo.errors import OlmoError
from olmo.metrics import read_metrics
from olmo.recipe import to_yaml
from olmo.smoke import loss_fell
from olmo.train import train


def _losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


def test_resume_is_bit_identical(tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    straight = train(micro(tiny_data, tmp_path / "a"))
    cfg = micro(tiny_data, tmp_path / "b")
    cfg.hard_stop = 10  # a job killed at step 10 (after its checkpoint); the schedule still spans 20 steps
    first = train(cfg)
    assert first.step == 10 and checkpoint.latest(tmp_path / "b").name == "step10"  # type: ignore[union-attr]
    second = train(micro(tiny_data, tmp_path / "b"), resume=True)
    assert second.start_step == 10 and second.step == 20
    assert len(straight.losses) == 20
    assert first.losses + second.losses == straight.losses  # exact float equality, not approx
    assert _losses(tmp_path / "b") == _losses(tmp_path / "a")
    assert second.eval_loss == straight.eval_loss
    assert straight.losses[-1] < straight.losses[0]


def test_resume_drops_metrics_written_after_the_last_checkpoint(
    tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig]
) -> None:
    cfg = micro(tiny_data, tmp_path, steps=12)
    cfg.hard_stop = 12
    cfg.save_interval = 10
    train(cfg)
    checkpoint.remove_tree(tmp_path / "checkpoints" / "step12")  # as if killed before saving step 12
    (tmp_path / "checkpoints" / "latest").write_text("step12\n")  # a stale pointer falls back too
    res = train(micro(tiny_data, tmp_path, steps=12), resume=True)
    assert res.start_step == 10
    steps = [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert steps == list(range(1, 13))


def test_existing_run_needs_resume(tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    cfg = micro(tiny_data, tmp_path, steps=2)
    cfg.save_interval = 1
    train(cfg)
    with pytest.raises(ConfigError, match="pass --resume"):
        train(cfg)
    changed = micro(tiny_data, tmp_path, steps=4)
    changed.model.n_layers = 3
    with pytest.raises(ConfigError, match=r"model differs from the recipe \(model.n_layers\)"):
        train(changed, resume=True)


def _fake_check(errors: bool) -> object:
    fix = SimpleNamespace(commands=["pip install torch --index-url https://download.pytorch.org/whl/cu128"])
    finding = SimpleNamespace(severity="error", title="torch cannot see the GPU", code="OD123", message="m",
                              fixes=[fix])
    return SimpleNamespace(has_errors=errors, findings=[finding] if errors else [])


def _recipe(cfg: TrainConfig, tmp_path: Path) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(to_yaml(cfg))
    return path


def test_doctor_errors_refuse_training(
    tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    import olmo_doctor.api

    calls: list[dict[str, object]] = []
    def fake_run_check(**kw: object) -> object:
        calls.append(kw)
        return _fake_check(True)

    monkeypatch.setattr(olmo_doctor.api, "run_check", fake_run_check)
    res = CliRunner().invoke(app, ["train", str(_recipe(micro(tiny_data, tmp_path / "run", steps=2), tmp_path))])
    assert isinstance(res.exception, OlmoError) and res.exception.exit_code == 2  # main() prints it as one line
    line = str(res.exception)
    assert "\n" not in line and calls == [{"scope": "train", "plan_device": "cpu"}]
    assert "OD123 torch cannot see the GPU" in line
    assert "first fix: pip install torch --index-url https://download.pytorch.org/whl/cu128" in line
    assert "--skip-doctor" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained

    recipe = str(_recipe(micro(tiny_data, tmp_path / "run", steps=2), tmp_path))
    res = CliRunner().invoke(app, ["train", recipe, "--skip-doctor"])
    assert res.exit_code == 0, res.output
    assert "WARNING: --skip-doctor" in res.output
    assert len(_losses(tmp_path / "run")) == 2


def test_smoke_cli_trains_and_loss_falls(monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo_doctor.api

    monkeypatch.setattr(olmo_doctor.api, "run_check", lambda **kw: _fake_check(False))
    res = CliRunner().invoke(app, ["train", "--smoke", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "smoke run passed: 20 steps on cpu" in res.output
    losses = [float(line.split("loss ")[1].split()[0]) for line in res.output.splitlines() if line.startswith("step ")]
    assert len(losses) == 20 and loss_fell(losses)


def test_loss_fell_rule() -> None:
    assert loss_fell([6.6, 6.0, 5.0, 4.5, 4.3, 4.2, 4.1, 4.0])
    assert not loss_fell([6.6, 6.6, 6.5, 6.6, 6.5, 6.6, 6.5, 6.6])  # flat: a broken update
    assert not loss_fell([6.6, 4.0])  # too few steps to judge


def test_metrics_records(tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    train(micro(tiny_data, tmp_path, steps=5))
    records = read_metrics(tmp_path / "metrics.jsonl")
    step5 = [r for r in records if r["step"] == 5]
    assert {"loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu"} <= set(step5[0])
    assert step5[0]["tokens"] == 5 * 8 * 64 and step5[0]["mfu"] is None  # no GPU peak on a CPU
    assert "eval_loss" in step5[1] and step5[1]["eval_ppl"] > 1
    state = json.loads((tmp_path / "checkpoints" / "step5" / "train_state.json").read_text())
    assert state["step"] == 5 and state["tokens_seen"] == 5 * 8 * 64
    assert {"torch", "cuda", "numpy", "python"} <= set(state["rng"])
    assert state["saved_at"].endswith("+00:00") and state["config"]["model"]["d_model"] == 64
    assert state["data_loader"]["batch_in_epoch"] == 5


def test_cuda_graph_off_a_gpu_warns_and_trains_eagerly(tiny_data: Path, tmp_path: Path,
                                                       micro: Callable[..., TrainConfig]) -> None:
    from io import StringIO

    from rich.console import Console

    cfg = micro(tiny_data, tmp_path / "g", steps=3)
    cfg.cuda_graph = True  # on the CPU: no graph, no bf16 copies; the run must say so and go on
    out = StringIO()
    res = train(cfg, console=Console(file=out, width=200))
    assert res.step == 3 and "cuda_graph is on but ignored" in out.getvalue()
