"""Benchmark `olmo-doctor build-kernels` for one package end to end on a GPU machine.

    python3 -m pip install -e . --no-deps --no-build-isolation
    python3 bench/build_kernels.py --sdist .bench/flash_attn-2.8.3.post2.tar.gz           # flash-attn, --subset olmo
    python3 bench/build_kernels.py --package flash-attn-3 --sdist .bench/flash-attention-3-0251105a.tar.gz
    python3 bench/build_kernels.py --package xformers --subset none --sdist .bench/xformers-0.0.35.tar.gz

(bench/fetch_sources.sh makes the carried sources.) The build seconds are split as compile (until ninja's last
object), link (shared library and wheel, the rest of pip's wall time) and install (pip install of the wheel).

Runs the real command twice in a fresh cache (XDG_CACHE_HOME under /tmp, so nothing cached from earlier runs
counts): (1) source to installed, GPU-verified wheel; (2) the same request again, which must install from the
wheel cache. Prints the wall times, the build's peak RAM against the plan's prediction, and ratios against the
anchor: the plain single-arch build of the same sdist (FLASH_ATTN_CUDA_ARCHS=90 MAX_JOBS=16 NVCC_THREADS=1
pip wheel) took 1107 s on the same kind of host (H200, 16 vCPU, 128 GB; measured 2026-11-29). That build
takes too long to re-run inside the GPU budget, so the anchor is a constant here, not measured in this run.

Targets (flash-attn): subset end to end <= 120 s and >= 9x faster than the anchor; peak RAM within +-25%
of the prediction; every package: cached reinstall <= 5 s, built and verified on the GPU. Exit code 0 when all are
met, 1 otherwise. `--json FILE` saves results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANCHOR_PLAIN_BUILD_S = 1107.0  # measured 2026-11-29 on the H200 host (plain single-arch build)
TARGET_WALL_S, TARGET_SPEEDUP, TARGET_RAM_BAND, TARGET_CACHED_S = 120.0, 9.0, 0.25, 5.0


def _run(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """Run build-kernels; its progress goes straight to our stderr, its JSON result comes back."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "olmo_doctor", "build-kernels", *args], env=env, stdout=subprocess.PIPE, text=True
    )
    wall = time.monotonic() - start
    try:
        out = json.loads(proc.stdout)["results"][0]
    except (ValueError, KeyError, IndexError):
        out = {"status": "no JSON", "stdout": proc.stdout[-2000:]}
    out["returncode"] = proc.returncode
    return wall, out


def _compile_s(timeline: list) -> float | None:
    """Seconds until ninja's last object ([n/n]) finished, from build-kernels' timeline; None without one."""
    steps = [t for t, what in timeline if str(what).startswith("[") and "/" in str(what).split("]")[0]]
    return round(float(steps[-1]), 1) if steps else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sdist", required=True, help="the carried source .tar.gz (no internet needed)")
    ap.add_argument("--package", default="flash-attn", choices=["flash-attn", "flash-attn-3", "xformers"])
    ap.add_argument("--subset", default="olmo", help="'none' for the full build")
    ap.add_argument("--jobs", type=int, help="upper bound on MAX_JOBS (when builds share the machine)")
    ap.add_argument("--json", dest="json_out", help="also write the results to this file")
    ap.add_argument("--keep-cache", action="store_true", help="leave the temporary cache for inspection")
    ap.add_argument("--arch", help="target compute capability (only to try the bench on a machine without a GPU)")
    args = ap.parse_args()
    sdist = Path(args.sdist).resolve()
    if not sdist.is_file():
        print(f"bench: {sdist} not found", file=sys.stderr)
        return 2
    cache = Path(tempfile.mkdtemp(prefix="olmo-bench-cache-"))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    common = ["--package", args.package, "--source", str(sdist), "--json"]
    if args.subset != "none":
        common += ["--subset", args.subset]
    if args.arch:
        common += ["--arch", args.arch]
    if args.jobs:
        common += ["--jobs", str(args.jobs)]
    try:
        plan = json.loads(
            subprocess.run(
                [sys.executable, "-m", "olmo_doctor", "build-kernels", *common, "--dry-run"],
                env=env,
                capture_output=True,
                text=True,
            ).stdout
        )["plans"][0]
        build_s, first = _run(common, env)
        cached_s, second = _run([*common, "--no-verify"], env)
    finally:
        if not args.keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
    if first.get("status") != "built":  # refused or failed: no timing means anything
        print(json.dumps({"status": first.get("status"), "result": first}, indent=1))
        print(
            f"bench: the build did not complete (status {first.get('status')}); see the output above", file=sys.stderr
        )
        return 1
    peak, predicted = first.get("peak_rss_gb"), plan["predicted_peak_gb"]
    ram_ratio = peak / predicted if peak else None
    compile_s = _compile_s(first.get("timeline") or [])
    results = {
        "package": args.package,
        "subset": args.subset,
        "build_s": {"compile": compile_s, "link": round(first["wall_s"] - compile_s, 1) if compile_s else None,
                    "install": first.get("install_s")},
        "verify_s": first.get("verify_s"),
        "plan": {
            k: plan[k]
            for k in ("version", "archs", "max_jobs", "nvcc_threads", "translation_units", "compile_jobs",
                      "predicted_peak_gb")
        },
        "end_to_end_s": round(build_s, 1),
        "compile_s": first.get("wall_s"),
        "phases_s": {k: first.get(k) for k in ("source_s", "wall_s", "install_s", "verify_s")},
        "timeline": first.get("timeline"),
        "status": first.get("status"),
        "verified": first.get("verified"),
        "peak_rss_gb": peak,
        "peak_vs_predicted": round(ram_ratio, 3) if ram_ratio else None,
        "cached_reinstall_s": round(cached_s, 2),
        "cached_status": second.get("status"),
        "cached_pip_install_s": second.get("install_s"),
        "anchor_plain_build_s": ANCHOR_PLAIN_BUILD_S,
        "anchor_note": "constant measured 2026-11-29 on the same kind of H200 host, not re-measured",
        "speedup_vs_anchor": round(ANCHOR_PLAIN_BUILD_S / build_s, 2),
    }
    checks = {
        f"cached reinstall <= {TARGET_CACHED_S:g} s": cached_s <= TARGET_CACHED_S and second.get("status") == "cached",
        "built and verified on the GPU": first.get("status") == "built" and first.get("verified") is True,
    }
    if args.package == "flash-attn":  # the anchor and the time target are flash-attn 2's (issue 7)
        checks.update({
            f"end to end <= {TARGET_WALL_S:g} s": build_s <= TARGET_WALL_S,
            f">= {TARGET_SPEEDUP:g}x faster than the plain build": ANCHOR_PLAIN_BUILD_S / build_s >= TARGET_SPEEDUP,
            f"peak RAM within +-{TARGET_RAM_BAND:.0%} of the plan": ram_ratio is not None
            and abs(ram_ratio - 1) <= TARGET_RAM_BAND,
        })
    results["checks"] = checks
    if args.keep_cache:  # where build-kernels recorded its GPU check (bench/kernels_all.py merges the records)
        results["cache_dir"] = str(cache)
    print(json.dumps(results, indent=1))
    print(f"\n{args.package} --subset {args.subset}: {build_s:.1f} s end to end ({first.get('wall_s')} s in pip)")
    if args.package == "flash-attn":
        print(f"vs {ANCHOR_PLAIN_BUILD_S:g} s plain single-arch build (anchor constant) = "
              f"{ANCHOR_PLAIN_BUILD_S / build_s:.1f}x faster")
    print(
        f"peak RAM {peak} GB vs predicted {predicted} GB (ratio {results['peak_vs_predicted']}); "
        f"cached reinstall {cached_s:.2f} s (pip install {second.get('install_s')} s)"
    )
    for name, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
