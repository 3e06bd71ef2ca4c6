"""Replays of `olmo-doctor check --json` captured on the GPU machines (an H200, and 2x H200 with --nccl): the
rules and the env plan give today what they gave there."""

from __future__ import annotations

import json

from helpers import FIXTURES

from olmo_doctor.api import run_check
from olmo_doctor.report import load_report

CAPTURE = FIXTURES / "machines" / "h200-check" / "check.json"
NCCL = FIXTURES / "machines" / "h200x2-nccl-check.json"


def test_h200_capture_replays_clean_with_the_same_env() -> None:
    recorded = json.loads(CAPTURE.read_text())
    facts = load_report(CAPTURE)
    assert facts["gpu.0.name"] == "NVIDIA H200" and facts["gpu.0.compute_capability"] == "9.0"
    assert facts["torch.cuda_available"] is True and facts["torch.arch_list"][-1] == "sm_120"  # type: ignore[index]
    result = run_check(facts=facts)
    assert [f.code for f in result.errors] == []
    assert {k: v.value for k, v in result.env.items()} == recorded["env"]


def test_two_h200_allreduce_capture_is_healthy_and_a_slow_one_is_not() -> None:
    facts = json.loads(NCCL.read_text())["facts"]
    assert facts["nccl.link"] == "NV18" and facts["nccl.busbw_gbps"] > 300 and facts["nccl.correct"] is True
    codes = {f.code for f in run_check(scope="train", facts=facts).findings}
    assert not codes & {"OD010", "OD011", "OD012", "OD013"}
    slow = {**facts, "nccl.busbw_gbps": 40.0, "nccl.efficiency": 40.0 / 450.0}
    assert "OD012" in {f.code for f in run_check(scope="train", facts=slow).findings}
