"""bench/olmo3_throughput.py `lengths` (cost as sequences grow), its plumbing on the CPU: OLMo-core gets the blocks
ours checkpointed at each length (equal settings), is retried with every block checkpointed when that does not fit,
and both trainers' activation-checkpointing options wrap the blocks they name on real (tiny) models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import olmo3_throughput as o3  # noqa: E402
import train_throughput as tt  # noqa: E402


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(length_impls=";".join(o3.LENGTH_IMPLS), layers=2, steps=1, warmup=1, out=None,
                              seqs="64,128", core_fallbacks="budget:0.25;full", logs=None, **kw)


def _result(tps: int, blocks: list[int]) -> dict[str, Any]:
    return {"tokens_per_s": tps, "peak_mem_gb": 1.0, "ac_blocks": blocks}


def test_olmo_core_gets_the_blocks_ours_checkpointed_and_full_when_that_does_not_fit() -> None:
    calls: list[tuple[str, int]] = []

    def run(impl: str, seq: int, a: argparse.Namespace) -> dict[str, Any] | None:
        calls.append((impl, seq))
        if impl.startswith("ours"):
            return _result(1200, [0, 1] if seq > 64 else [])
        return None if "ckpt=0+1" in impl or "budget" in impl else _result(1000, [])

    rows = [o3.one_length(seq, _args(), run) for seq in (64, 128)]
    assert calls == [("ours:attn=flash_attn_3,ac=auto", 64), ("olmo-core-compile:attn=flash_3,ckpt=none", 64),
                     ("ours:attn=flash_attn_3,ac=auto", 128), ("olmo-core-compile:attn=flash_3,ckpt=0+1", 128),
                     ("olmo-core-compile:attn=flash_3,ckpt=budget:0.25", 128),
                     ("olmo-core-compile:attn=flash_3,ckpt=full", 128)]
    assert [r["core_ckpt"] for r in rows] == ["none", "full"] and rows[1]["ours_ckpt"] == "0+1"
    assert rows[0]["ratio"] == pytest.approx(1.2)
    table = o3.length_table(rows)
    assert "| 128 | 1,200 tok/s, 1.0 GB | 0+1 / full | 1,000 tok/s, 1.0 GB | 1.200x |" in table


def test_a_failed_length_fails_the_run_and_shows_in_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    def run(impl: str, seq: int, a: argparse.Namespace) -> dict[str, Any] | None:
        return _result(1000, []) if impl.startswith("ours") or seq == 64 else None

    assert o3.lengths(_args(), run) == 1
    out = capsys.readouterr().out
    assert "| 128 | 1,000 tok/s, 1.0 GB | none / full | failed | - |" in out and "NOT met" in out


def test_ours_ac_option_wraps_what_the_trainer_would() -> None:
    from olmo.config import ModelConfig
    from olmo.model import build_model

    cfg = ModelConfig(d_model=32, n_layers=3, n_heads=2, mlp_hidden=64, vocab_size=64, max_seq_len=16)
    model = build_model(cfg, torch.device("cpu"), seed=0)
    note = tt.apply_ours_ac(model, cfg, "auto", 1, 16, torch.device("cpu"), copies=True)
    assert note["ac_blocks"] == [] and "not a CUDA device" in note["ac_said"]
    assert tt.apply_ours_ac(model, cfg, "full", 1, 16, torch.device("cpu"), copies=True)["ac_blocks"] == [0, 1, 2]
    x = torch.randint(0, 64, (1, 16))
    loss, _, _ = model(x, labels=x)
    loss.backward()  # the wrapped blocks still train
    assert model.blocks["0"]._checkpoint_wrapped_module.attention.w_q.weight.grad is not None


def test_olmo_core_ckpt_option_wraps_the_named_blocks() -> None:
    from olmo_core.nn.transformer import TransformerConfig

    def model() -> Any:
        cfg = TransformerConfig.llama_like(d_model=32, vocab_size=64, n_layers=3, n_heads=2)
        return cfg.build(init_device="cpu")

    assert tt.apply_core_ckpt(model(), "none") == []
    assert tt.apply_core_ckpt(model(), "0+2") == [0, 2]
    assert tt.apply_core_ckpt(model(), "full") == [0, 1, 2]
    budget = model()
    assert tt.apply_core_ckpt(budget, "budget:0.25") == []  # the compiler decides; no block is wrapped
    assert torch._functorch.config.activation_memory_budget == pytest.approx(0.25)
    torch._functorch.config.activation_memory_budget = 1.0  # process-wide: leave it as it was


def test_the_lengths_driver_times_steps_after_the_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(argv: list[str], **kw: Any) -> Any:
        seen.append(argv)
        return argparse.Namespace(returncode=0)

    monkeypatch.setattr(o3.subprocess, "run", fake_run)
    assert o3.run_impl("ours:attn=flex", 4096, _args()) is None  # wrote nothing: failed
    argv = seen[0]
    assert argv[argv.index("--steps") + 1] == "2" and argv[argv.index("--warmup") + 1] == "1"


def test_train_throughput_refuses_steps_that_leave_nothing_to_time() -> None:
    import subprocess

    out = subprocess.run([sys.executable, str(BENCH / "train_throughput.py"), "--steps", "3", "--warmup", "4"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "warm-up steps included" in out.stderr
