"""Benchmark: `olmo-doctor check --json` wall time against `python -m torch.utils.collect_env`, same machine,
same run. Prints both medians and the ratio (target: check <= 0.3 s and >= 15x faster).

    python bench/check_latency.py [--runs 7]

Both commands run as fresh processes, as a user would run them. The first check of a new torch install pays
one torch-importing subprocess whose answer is cached; that warm-up run is reported separately.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="olmo-doctor-bench-")
    env = {**os.environ, "XDG_CACHE_HOME": cache}
    exe = shutil.which("olmo-doctor", path=os.path.dirname(sys.executable)) or "olmo-doctor"
    check = [exe, "check", "--json"]
    try:
        first = wall(check, env)  # cold: fills the torch-facts cache
        checks = [wall(check, env) for _ in range(args.runs)]
        collects = [wall([sys.executable, "-m", "torch.utils.collect_env"], env) for _ in range(max(3, args.runs // 2))]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    c, t = statistics.median(checks), statistics.median(collects)
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(f"olmo-doctor check --json   first run {first:.3f} s (fills cache), median of {len(checks)}: {c:.3f} s")
    print(f"torch.utils.collect_env    median of {len(collects)}: {t:.3f} s")
    print(f"ratio: check is {t / c:.1f}x faster (target >= 15x); check {'<=' if c <= 0.3 else '>'} 0.3 s target")


if __name__ == "__main__":
    main()
