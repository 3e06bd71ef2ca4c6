"""`attn_backend: auto`: the fastest backend that is numerically right wins, a wrong one never does, the CPU gets
SDPA without timing, and the decision is cached."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from olmo import attention_choice
from olmo.attention_choice import choose, decide
from olmo.config import ModelConfig


def test_fastest_correct_backend_wins() -> None:
    c = decide({"sdpa": (2.09, 0.0), "flash_attn": (3.44, 1.9e-3)})
    assert c.backend == "sdpa" and "sdpa 2.09 ms" in c.reason
    c = decide({"sdpa": (2.09, 0.0), "flash_attn": (1.50, 1.9e-3)})
    assert c.backend == "flash_attn"


def test_a_fast_but_wrong_kernel_never_wins() -> None:
    c = decide({"sdpa": (2.09, 0.0), "flash_attn": (0.5, 0.9)})
    assert c.backend == "sdpa" and "rejected as numerically wrong: flash_attn" in c.reason


def test_cpu_is_sdpa_without_timing() -> None:
    def never(*_: object) -> dict[str, tuple[float, float]]:
        raise AssertionError("must not time on the CPU")

    assert choose(ModelConfig(), 2, 64, torch.device("cpu"), measure_fn=never).backend == "sdpa"


def test_cuda_choice_is_timed_once_then_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(attention_choice, "_cache_key", lambda *a: "k")
    monkeypatch.setattr(attention_choice, "_recorded_by_build_kernels", lambda d: None)
    calls: list[int] = []

    def fake_measure(*_: object) -> dict[str, tuple[float, float]]:
        calls.append(1)
        return {"sdpa": (2.0, 0.0), "eager": (1.0, 0.0)}

    dev = torch.device("cuda")
    first = choose(ModelConfig(), 4, 4096, dev, measure_fn=fake_measure)
    second = choose(ModelConfig(), 4, 4096, dev, measure_fn=fake_measure)
    assert first.backend == second.backend == "eager" and len(calls) == 1
    assert second.reason.endswith("(cached)")


def test_auto_is_the_default_and_builds_with_sdpa_outside_the_trainer() -> None:
    from olmo.model import build_model

    cfg = ModelConfig(d_model=32, n_layers=1, n_heads=2, mlp_hidden=64, vocab_size=64, max_seq_len=16)
    assert cfg.attn_backend == "auto"
    model = build_model(cfg, torch.device("cpu"), seed=0)
    assert model(torch.randint(0, 64, (1, 16))).shape == (1, 16, 64)
