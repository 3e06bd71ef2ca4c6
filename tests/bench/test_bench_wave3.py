"""The kernel-build verdicts of bench/kernels_all.py and the wave3 summary table (bench/wave3_summary.py) on
results written here: every target is judged from the recorded numbers, and a miss reads NOT met."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import kernels_all  # noqa: E402
import wave3_summary  # noqa: E402


def _build(finished: float, ratio: float, cached: float = 2.0, verified: bool = True) -> dict[str, Any]:
    return {"finished_at_s": finished, "cached_reinstall_s": cached, "cached_status": "cached", "verified": verified,
            "peak_vs_predicted": ratio, "peak_rss_gb": 10.0, "end_to_end_s": finished - 5,
            "build_s": {"compile": finished - 20}, "plan": {"version": "1+olmo", "max_jobs": 7, "compile_jobs": 7,
                                                            "predicted_peak_gb": 10.0 / ratio}}


def _builds(**over: dict[str, Any]) -> dict[str, dict[str, Any]]:
    builds = {"flash-attn-3": _build(171.0, 0.9), "flash-attn": _build(150.0, 1.05), "xformers": _build(120.0, 1.0)}
    builds.update(over)
    return builds


def test_targets_met_when_every_build_is_ready_in_time_within_its_ram_plan() -> None:
    met = kernels_all.targets(_builds())
    assert all(met.values()) and len(met) == 3  # FA3 ready at 171 - 2 = 169 s


def test_each_target_can_fail() -> None:
    late = kernels_all.targets(_builds(**{"flash-attn-3": _build(185.0, 0.9)}))
    assert [k for k, ok in late.items() if not ok] == ["all 3 built, installed and verified <= 180 s"]
    ram = kernels_all.targets(_builds(xformers=_build(120.0, 0.17)))
    assert [k for k, ok in ram.items() if not ok] == ["each peak RAM within +-25% of its plan"]
    slow = kernels_all.targets(_builds(xformers=_build(120.0, 1.0, cached=6.0)))
    assert [k for k, ok in slow.items() if not ok] == ["each cached reinstall <= 5 s"]
    unverified = kernels_all.targets(_builds(xformers=_build(120.0, 1.0, verified=False)))
    assert not unverified["all 3 built, installed and verified <= 180 s"]
    missing = dict(_builds())
    del missing["xformers"]
    assert not kernels_all.targets(missing)["all 3 built, installed and verified <= 180 s"]


def test_summary_reads_the_run_folder(tmp_path: Path) -> None:
    (tmp_path / "kernels_all.json").write_text(json.dumps({"builds": _builds(xformers=_build(120.0, 0.5))}))
    row = {"seq": 8192, "ours": {"tokens_per_s": 1150, "peak_mem_gb": 40.0}, "core": {"tokens_per_s": 1000,
           "peak_mem_gb": 45.0}, "ours_ckpt": "none", "core_ckpt": "none", "ratio": 1.15}
    (tmp_path / "lengths.jsonl").write_text(json.dumps({**row, "seq": 65536}) + "\n" + json.dumps(row) + "\n")
    text = wave3_summary.summary(tmp_path)
    assert "- NOT met: each peak RAM within +-25% of its plan" in text
    assert "- met: all 3 built, installed and verified <= 180 s" in text
    assert text.index("| 8,192 |") < text.index("| 65,536 |")  # shortest first
    assert "| xformers 1+olmo | 7 (7 files) | 100.0 | 115.0 | yes | 10.0 / 20.0 (0.5) | 2.0 |" in text
    assert "no kernels_all.json" in wave3_summary.summary(tmp_path / "missing")
