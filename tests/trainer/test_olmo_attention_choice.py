"""`attn_backend: auto`: the fastest backend that is numerically right wins, a wrong one never does, the CPU gets
SDPA without timing, and the decision is cached."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from olmo.config import ModelConfig
from olmo.nn import attention_choice
from olmo.nn.attention_choice import choose, decide


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


def test_flash_attention_3_and_xformers_are_candidates_that_say_why_not_here() -> None:
    from olmo.nn.attention import BACKENDS

    cpu = torch.device("cpu")
    assert {"flash_attn_3", "xformers"} <= set(attention_choice.CANDIDATES)
    assert "CUDA" in (BACKENDS["flash_attn_3"].unavailable(cpu) or "")
    assert "CUDA" in (BACKENDS["xformers"].unavailable(cpu) or "")
    assert BACKENDS["flash_attn_3"].windows and not BACKENDS["xformers"].windows
    assert attention_choice.candidates(ModelConfig(), cpu) == ["sdpa"]


def test_a_backend_without_windows_is_no_candidate_for_olmo3_and_refused_when_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from olmo.config import ConfigError
    from olmo.nn.attention import BACKENDS, get_backend

    monkeypatch.setitem(BACKENDS, "xformers", dataclasses.replace(BACKENDS["xformers"], unavailable=lambda d: None))
    cpu = torch.device("cpu")
    olmo2, olmo3 = ModelConfig(), ModelConfig.olmo2_like(256, 4, 4, sliding_window=[64, 64, 64, -1])
    assert olmo3.windowed and not olmo2.windowed
    assert "xformers" in attention_choice.candidates(olmo2, cpu)
    assert "xformers" not in attention_choice.candidates(olmo3, cpu)
    assert get_backend("xformers", cpu).name == "xformers"
    with pytest.raises(ConfigError, match="no sliding-window support"):
        get_backend("xformers", cpu, windowed=True)


def test_xformers_glue_repeats_kv_heads_and_refuses_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's own code (layout, grouped-query heads, the causal bias) against a stand-in xformers.ops that
    computes causal attention the plain way."""
    import sys
    import types

    from olmo.nn.attention import BACKENDS

    mask = object()

    def memory_efficient_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_bias: object
                                   ) -> torch.Tensor:
        assert attn_bias is mask and q.shape == k.shape == v.shape  # kv heads were repeated to match q
        return BACKENDS["eager"].fn(q, k, v, None).to(q.dtype)

    ops = types.ModuleType("xformers.ops")
    ops.memory_efficient_attention = memory_efficient_attention  # type: ignore[attr-defined]
    ops.LowerTriangularMask = lambda: mask  # type: ignore[attr-defined]
    pkg = types.ModuleType("xformers")
    pkg.ops = ops  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "xformers", pkg)
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 16, 4, 8, generator=g)
    k, v = torch.randn(2, 16, 2, 8, generator=g), torch.randn(2, 16, 2, 8, generator=g)
    out = BACKENDS["xformers"].fn(q, k, v, None)
    ref = BACKENDS["sdpa"].fn(q, k, v, None)
    assert torch.allclose(out, ref, atol=1e-5)
    with pytest.raises(RuntimeError, match="sliding-window"):
        BACKENDS["xformers"].fn(q, k, v, 8)


def test_a_build_kernels_record_names_the_trainer_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dataclasses

    from olmo.nn.attention import BACKENDS

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(attention_choice, "_cache_key", lambda *a: "k2")
    monkeypatch.setattr(attention_choice, "_recorded_by_build_kernels",
                        lambda d: attention_choice.RECORDED_NAMES["flash-attn-3"])
    monkeypatch.setitem(BACKENDS, "flash_attn_3",
                        dataclasses.replace(BACKENDS["flash_attn_3"], unavailable=lambda d: None))

    def never(*_: object) -> dict[str, tuple[float, float]]:
        raise AssertionError("a build-kernels record decides without timing")

    c = choose(ModelConfig(), 4, 4096, torch.device("cuda"), measure_fn=never)
    assert c.backend == "flash_attn_3" and "build-kernels" in c.reason


def test_measure_weights_windowed_and_full_layers_by_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """OLMo 3: 3 windowed layers per full one. A backend fast on windows but slow on full layers must be charged
    for both (numbers from an H200: flex 4.23 / 5.34 ms, sdpa with flex windows 4.24 / 3.77 ms)."""
    times = {("flex", 4096): 4.23, ("flex", None): 5.34, ("sdpa", 4096): 4.24, ("sdpa", None): 3.77}
    monkeypatch.setattr(attention_choice, "candidates", lambda cfg, device, names=(): ["sdpa", "flex"])

    def fake_time(fn: object, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None
                  ) -> tuple[float, torch.Tensor]:
        name = next(n for n, b in attention_choice.BACKENDS.items() if b.fn is fn)
        return times[(name, window)], torch.ones(1)

    monkeypatch.setattr(attention_choice, "_time_fwd_bwd", fake_time)
    cfg = ModelConfig(d_model=64, n_layers=8, n_heads=4, sliding_window=[4096, 4096, 4096, -1])
    got = attention_choice.measure(cfg, 1, 8, torch.device("cpu"))
    # layers 3 and 7 are full (the pattern's -1 and the forced last layer): 6 windowed, 2 full
    assert got["flex"][0] == pytest.approx((6 * 4.23 + 2 * 5.34) / 8)
    assert got["sdpa"][0] == pytest.approx((6 * 4.24 + 2 * 3.77) / 8)
    assert decide(got).backend == "sdpa"
