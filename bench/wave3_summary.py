"""The summary table of `bash bench/gpu_suite.sh wave3`: the kernel-build targets and the OLMo 3 cost as sequences
grow, read from what that run wrote (kernels_all.json, lengths.jsonl) in one folder.

    python3 bench/wave3_summary.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_all import targets
from olmo3_throughput import length_table


def build_rows(builds: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| package | jobs | compile s | end to end s | verified | peak GB / plan (ratio) | cached reinstall s |",
             "|---|---|---|---|---|---|---|"]
    for package, r in builds.items():
        plan = r.get("plan", {})
        lines.append(f"| {package} {plan.get('version', '')} | {plan.get('max_jobs')} ({plan.get('compile_jobs')} "
                     f"files) | {r.get('build_s', {}).get('compile')} | {r.get('end_to_end_s')} | "
                     f"{'yes' if r.get('verified') else 'NO'} | {r.get('peak_rss_gb')} / "
                     f"{plan.get('predicted_peak_gb')} ({r.get('peak_vs_predicted')}) | "
                     f"{r.get('cached_reinstall_s')} |")
    return lines


def summary(out: Path) -> str:
    lines: list[str] = []
    kj = out / "kernels_all.json"
    if kj.is_file():
        builds = json.loads(kj.read_text()).get("builds", {})
        lines += ["Kernel builds, all three started together:", "", *build_rows(builds), ""]
        lines += [f"- {'met' if ok else 'NOT met'}: {name}" for name, ok in targets(builds).items()]
    else:
        lines.append("Kernel builds: no kernels_all.json (the builds did not finish)")
    lj = out / "lengths.jsonl"
    rows = [json.loads(x) for x in lj.read_text().splitlines() if x.strip()] if lj.is_file() else []
    lines += ["", "OLMo 3 7B shape, 8 layers, one H200, batch 1 x L (ours: parallel.ac auto; OLMo-core: the same "
              "blocks checkpointed):", ""]
    lines.append(length_table(sorted(rows, key=lambda r: r["seq"])) if rows else "no length finished")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-out")))
