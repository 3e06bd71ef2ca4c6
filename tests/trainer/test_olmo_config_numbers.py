"""Config numbers: NaN, infinity and negatives are refused by field name wherever they make no sense, and a
step predicted to take minutes on the chosen device is warned about in one line (not refused)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.config import ConfigError, TrainConfig, validate
from olmo.config_numbers import slow_step, step_seconds
from olmo.recipe import apply_override, config_to_dict, from_dict

BAD = [
    ("optim.lr", "nan"), ("optim.lr", ".inf"), ("optim.lr", "-3e-4"), ("optim.lr", "0"),
    ("optim.weight_decay", ".nan"), ("optim.weight_decay", "-0.1"), ("optim.grad_clip", "inf"),
    ("optim.grad_clip", "-1"), ("optim.eps", "0"), ("optim.eps", "nan"), ("optim.betas", "[0.9, .nan]"),
    ("optim.betas", "[-0.1, 0.95]"), ("optim.warmup_steps", "-1"), ("optim.final_lr_ratio", "-.5"),
    ("optim.final_lr_ratio", "1.5"), ("model.rope_theta", "-1"), ("model.norm_eps", ".nan"),
    ("model.init_std", "0"), ("model.z_loss_multiplier", "-1e-5"), ("data.val_fraction", ".nan"),
    ("eval_interval", "-1"), ("keep_last_n", "-2"), ("seed", "-1"), ("data.seed", "-3"), ("model.n_kv_heads", "-2"),
]


def _cfg(tmp: Path, micro: Callable[..., TrainConfig], key: str, value: str) -> TrainConfig:
    raw = config_to_dict(micro(tmp, tmp / "run"))
    apply_override(raw, f"{key}={value}")
    return from_dict(raw)


@pytest.mark.parametrize(("key", "value"), BAD, ids=[f"{k}={v}" for k, v in BAD])
def test_bad_number_is_refused_by_name(key: str, value: str, tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    cfg = _cfg(tmp_path, micro, key, value)
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert key.split(".")[-1] in str(e.value) and "\n" not in str(e.value)


def test_good_numbers_pass(tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    for key, value in [("optim.grad_clip", "0"), ("optim.weight_decay", "0"), ("optim.warmup_steps", "0"),
                       ("optim.final_lr_ratio", "0"), ("model.z_loss_multiplier", "0")]:
        validate(_cfg(tmp_path, micro, key, value))


def test_slow_step_is_predicted_from_flops(tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    cfg = micro(tmp_path, tmp_path / "run")
    assert slow_step(cfg, "cpu") is None  # the micro model: milliseconds
    cfg.model.max_seq_len = cfg.data.seq_len = 80_000
    assert step_seconds(cfg, "cpu") > 60
    warning = slow_step(cfg, "cpu")
    assert warning is not None and "minute(s) on cpu" in warning and "\n" not in warning
    assert slow_step(cfg, "cuda") is None  # the same step on a GPU is seconds


def test_slow_step_warns_on_the_cli_and_still_runs(tmp_path: Path, micro: Callable[..., TrainConfig],
                                                   cli: Callable[..., tuple[int, str, str]]) -> None:
    from olmo.recipe import to_yaml

    cfg = micro(tmp_path, tmp_path / "run")
    cfg.model.max_seq_len = cfg.data.seq_len = 80_000
    (tmp_path / "r.yaml").write_text(to_yaml(cfg))
    code, out, err = cli("train", str(tmp_path / "r.yaml"), "--device", "cpu", "--dry-run")
    assert code == 0 and "parameters" in out
    assert err.count("\n") == 1 and err.startswith("olmo: warning: one step is predicted to take at least")
