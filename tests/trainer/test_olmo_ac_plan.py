"""`parallel.ac: auto`: the activation estimate per block, and the fewest checkpointed blocks that fit a GPU of a
given (fake) memory size, none when everything fits."""

from __future__ import annotations

import pytest
import torch

from olmo.ac_plan import MARGIN, RESERVE_BYTES, act_elems_per_token, plan_ac
from olmo.config import ModelConfig, TrainConfig

GB = 1024**3


def test_block_estimate_matches_the_measured_olmo3_7b_block() -> None:
    """Measured on 2x H200 (FSDP2, batch 1 x 8192): 0.94-1.0 GB of activations per block; the estimate may
    err upward (towards fitting) but not by more than ~10%."""
    cfg = ModelConfig.olmo3_7b()
    block = 8192 * act_elems_per_token(cfg) * 2
    assert 0.94e9 <= block <= 1.1e9


def test_nothing_checkpointed_when_everything_fits() -> None:
    """OLMo 3 7B on two 141 GB H200s under FSDP2: ran at 84.6 GB per GPU with no checkpointing."""
    plan = plan_ac(ModelConfig.olmo3_7b(), 1, 8192, 141 * 10**9, world_size=2, fsdp=True)
    assert plan.blocks == () and plan.fits
    assert "none" in plan.checkpointing_line(32)


def test_fewest_blocks_that_fit_a_smaller_gpu() -> None:
    cfg = ModelConfig.olmo3_7b()
    plans = {gb: plan_ac(cfg, 1, 8192, gb * GB, world_size=2, fsdp=True) for gb in (60, 70, 80, 96)}
    counts = [len(plans[gb].blocks) for gb in (60, 70, 80, 96)]
    assert counts == sorted(counts, reverse=True) and 0 < counts[-1] < counts[0] <= 32  # less memory, more blocks
    for plan in plans.values():
        if plan.fits and plan.blocks:
            # one block fewer would not fit: the plan is the fewest, not merely enough
            k = len(plan.blocks) - 1
            need = plan.static_bytes + (32 - k) * plan.block_bytes + k * (8192 * cfg.d_model * 2)
            assert need > plan.budget_bytes
            assert plan.blocks == tuple(range(len(plan.blocks)))
    assert plans[80].budget_bytes == int(80 * GB * (1 - MARGIN)) - RESERVE_BYTES


def test_too_small_says_so() -> None:
    plan = plan_ac(ModelConfig.olmo3_7b(), 1, 8192, 40 * GB)  # one GPU: 7B of fp32 state alone is > 100 GB
    assert len(plan.blocks) == 32 and not plan.fits
    assert "may not fit" in plan.checkpointing_line(32)


def test_longer_batches_need_more_checkpointing() -> None:
    cfg = ModelConfig.olmo2_like(2048, 16, 16)
    small = plan_ac(cfg, 1, 4096, 40 * GB, compute_copies=True)
    big = plan_ac(cfg, 8, 4096, 40 * GB, compute_copies=True)
    assert small.blocks == () and 0 < len(big.blocks) <= 16


def test_apply_ac_auto_wraps_the_planned_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo import parallel
    from olmo.model import Transformer

    cfg = TrainConfig()
    cfg.model = ModelConfig(d_model=64, n_layers=6, n_heads=4, mlp_hidden=128, vocab_size=128, max_seq_len=64)
    cfg.parallel.ac = "auto"
    model = Transformer(cfg.model)
    assert parallel.apply_ac(model, cfg, torch.device("cpu")) == \
        "activation checkpointing (auto): none (not a CUDA device)"

    class Props:
        total_memory = 8 * GB

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: Props())
    monkeypatch.setattr("olmo.ac_plan.plan_ac", lambda *a, **k: _fixed_plan())
    note = parallel.apply_ac(model, cfg, torch.device("cuda"))
    wrapped = [n for n, b in model.blocks.items() if type(b).__name__ == "CheckpointWrapper"]
    assert wrapped == ["0", "1"] and note is not None and "2 of 6 blocks" in note


def _fixed_plan() -> object:
    from olmo.ac_plan import AcPlan

    return AcPlan((0, 1), GB, GB, 3 * GB, 4 * GB)


@pytest.mark.parametrize(("mode", "every", "expected"), [("full", 1, ["0", "1", "2", "3", "4", "5"]),
                                                          ("selective", 2, ["0", "2", "4"]),
                                                          ("selective", 4, ["0", "4"]), ("none", 1, [])])
def test_apply_ac_wraps_the_blocks_the_mode_names(mode: str, every: int, expected: list[str]) -> None:
    from olmo import parallel
    from olmo.model import Transformer

    cfg = TrainConfig()
    cfg.model = ModelConfig(d_model=64, n_layers=6, n_heads=4, mlp_hidden=128, vocab_size=128, max_seq_len=64)
    cfg.parallel.ac, cfg.parallel.ac_every = mode, every
    model = Transformer(cfg.model)
    assert parallel.apply_ac(model, cfg, torch.device("cpu")) is None  # only auto has something to say
    assert [n for n, b in model.blocks.items() if type(b).__name__ == "CheckpointWrapper"] == expected
