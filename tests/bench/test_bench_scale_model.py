"""bench/scale_model.py (OLMo 3 on 8 and 64 H200s, on paper): it reproduces the 2-GPU FSDP2 run it is calibrated
on (tokens/s and memory), its communication follows the ring formulas, and it tells flat FSDP2 across nodes from
HSDP the way the bandwidths say it must."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scale_model as sm


def test_the_measured_two_gpu_run_is_reproduced() -> None:
    e = sm.estimate(sm.CALIBRATION)
    assert e.tokens_per_s_per_gpu == pytest.approx(sm.MEASURED_2GPU, rel=0.02)
    assert e.memory_gb == pytest.approx(90.8, rel=0.10)  # peak per GPU of that run (bench/RESULTS.md)
    assert e.bound == "compute" and e.checkpointed_blocks == 0


def test_ring_communication_counts_bytes_per_gpu() -> None:
    params = 1_000_000_000
    s = sm.Setup("olmo3_7b", 8, "fsdp", "bf16")
    assert sm.comm_seconds(params, s) == pytest.approx(8 * params * 7 / 8 / sm.NVLINK_BUSBW)
    flat = sm.comm_seconds(params, sm.Setup("olmo3_7b", 64, "fsdp", "bf16"))
    assert flat == pytest.approx(8 * params * 63 / 64 / sm.IB_BUSBW)  # the ring crosses nodes: InfiniBand bound
    hsdp = sm.comm_seconds(params, sm.Setup("olmo3_7b", 64, "hsdp", "bf16"))
    assert hsdp == pytest.approx(8 * params * 7 / 8 / sm.NVLINK_BUSBW + 2 * 4 * params / 8 * 7 / 8 / sm.IB_BUSBW)
    assert sm.comm_seconds(params, sm.Setup("olmo3_7b", 1, "fsdp", "bf16")) == 0.0


def test_32b_across_nodes_needs_hsdp_and_fp8_only_pays_when_compute_bound() -> None:
    flat = sm.estimate(sm.Setup("olmo3_32b", 64, "fsdp", "bf16"))
    hsdp = sm.estimate(sm.Setup("olmo3_32b", 64, "hsdp", "bf16"))
    assert flat.bound == "communication" and hsdp.bound == "compute"
    assert hsdp.tokens_per_s_per_gpu > 1.4 * flat.tokens_per_s_per_gpu
    flat8 = sm.estimate(sm.Setup("olmo3_32b", 64, "fsdp", "fp8"))
    assert flat8.tokens_per_s_per_gpu == pytest.approx(flat.tokens_per_s_per_gpu)  # the wire sets the pace
    hsdp8 = sm.estimate(sm.Setup("olmo3_32b", 64, "hsdp", "fp8"))
    assert hsdp8.tokens_per_s_per_gpu > 1.15 * hsdp.tokens_per_s_per_gpu
    assert hsdp.memory_gb <= sm.USABLE * sm.GPU_BYTES / 1e9 and hsdp.checkpointed_blocks > 0  # 16 B/param over 8


def test_table_has_a_row_per_setup() -> None:
    rows = [sm.estimate(s) for s in sm.SETUPS]
    text = sm.table(rows)
    assert text.count("\n") == len(rows) + 1 and "| olmo3_32b | 64 | hsdp | fp8 |" in text
