"""Benchmark: `check --from-report` on a 100 KB paste, its own time (reading, judging, recommending; not Python's
start-up), against the same check of a 3-line report measured in the same run. Target: <= 0.3 s own time.

    python bench/report_paste.py [--runs 9] [--kb 100]

The paste is what an issue thread holds: the reports of tests/fixtures/report_corpus/ (collect_env outputs,
tool outputs, pip lists, prose, tracebacks) repeated up to the size, so every reader works on it. Own time is
`run_check`'s elapsed time in a warm process (the first call, which imports and loads the rules, is reported
apart); a fresh `olmo-doctor check --from-report` process is timed once for the user's view.
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
from pathlib import Path

from olmo_doctor.api import run_check
from olmo_doctor.reports import collect_env

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "report_corpus"


def paste(kb: int, free_text_only: bool = False) -> str:
    """The corpus repeated to `kb` KB; `free_text_only` leaves out collect_env outputs, whose first report alone
    is read when several are pasted, so that every line goes through the free-text readers."""
    reports = [p.read_text(encoding="utf-8") for p in sorted(CORPUS.glob("*.txt"))]
    if free_text_only:
        reports = [r for r in reports if not collect_env.is_output(r)]
    text, i = "", 0
    while len(text.encode()) < kb * 1024:
        text += f"\n---- comment {i} ----\n" + reports[i % len(reports)]
        i += 1
    return text


def own(path: Path, runs: int) -> list[float]:
    with open(os.devnull, "w") as quiet:  # the "holds N collect_env reports" note, once per run
        saved, sys.stderr = sys.stderr, quiet
        try:
            return [run_check(from_report=path).elapsed_s for _ in range(runs)]
        finally:
            sys.stderr = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--kb", type=int, default=100)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="olmo-doctor-bench-"))
    try:
        big, free, small = work / "paste.txt", work / "free-text.txt", work / "three-lines.txt"
        big.write_text(paste(args.kb), encoding="utf-8")
        free.write_text(paste(args.kb, free_text_only=True), encoding="utf-8")
        small.write_text("PyTorch version: 2.7.1+cu126\nCUDA used to build PyTorch: 12.6\nIs CUDA available: True\n")
        start = time.perf_counter()
        run_check(from_report=small)
        first = time.perf_counter() - start
        anchor = statistics.median(own(small, args.runs))
        median = statistics.median(own(big, args.runs))
        free_median = statistics.median(own(free, args.runs))
        exe = shutil.which("olmo-doctor", path=os.path.dirname(sys.executable)) or "olmo-doctor"
        start = time.perf_counter()
        subprocess.run([exe, "check", "--json", "--from-report", str(big)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        process = time.perf_counter() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(f"pastes: {args.kb} KB each; first call in this process (imports, rules) {first:.3f} s")
    print(f"3-line report, own time, median of {args.runs}: {anchor:.4f} s (anchor)")
    for label, value in ((f"{args.kb} KB paste (all shapes)", median), (f"{args.kb} KB free text only", free_median)):
        print(f"{label}, own time, median of {args.runs}: {value:.4f} s ({value / anchor:.1f}x the anchor); "
              f"target <= 0.3 s: {'met' if value <= 0.3 else 'NOT met'}")
    print(f"fresh process `olmo-doctor check --json --from-report` on the paste: {process:.3f} s wall")


if __name__ == "__main__":
    main()
