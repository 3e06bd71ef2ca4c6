"""Benchmark: the time budgets on hostile or large input, in CPU seconds, each next to an anchor measured in the
same run on input of the same size. The tests prove these costs grow linearly (tests/scaling.py: n against 4n);
the absolute numbers, which depend on the machine, are checked here.

    python bench/input_budgets.py [--only NAME]

Each row: name, what is timed, its budget, and the anchor measured on input of the same size.
    report      the slowest 200 KB near-miss line a pasted report can hold      1.5 s   an ordinary report
    freeform    the slowest free-form pattern on a 256 KB near-miss line        0.5 s   a \\w+ token pass
    near-lines  20,000 repeated near-miss lines as a report                     3 s     an ordinary report
    check       `check --from-report` with a 1 MB GPU name of escaped brackets  10 s    the same check, plain name
    signatures  the slowest diagnose signature on a 1 MB near-miss line         4 s     a \\w+ token pass
    gzip-bomb   `diagnose` on 10 GiB of text gzipped to ~10 MB (stops at a cap) 3 s     diagnose on the capped text
    shards      the pre-training scan of 100 MB of token shards (max, sha256)  2 s     numpy max + hashlib sha256

Exit status 1 when a budget is missed. The 50 MB hostile log is bench/diagnose_speed.py --hostile.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._adversarial import build, recipes  # noqa: E402
from tests.security.test_security_redos import FILLERS, PREFIXES  # noqa: E402

# near-miss lines of about n characters for the free-form reader's patterns
NEAR_MISSES: list[Callable[[int], str]] = [
    lambda n: "torch" * (n // 5), lambda n: "torch " + " " * n + "x", lambda n: "GPU 0: " + "a " * (n // 2) + "(UUID:",
    lambda n: "|   0  NVIDIA " + "x" * n, lambda n: "NVIDIA-SMI " + "1." * (n // 2), lambda n: "2x RTX " * (n // 7),
    lambda n: "driver " * (n // 7), lambda n: "python " + "3." * (n // 2), lambda n: "gcc (" + "x" * n,
    lambda n: "torch.version.cuda" * (n // 18), lambda n: "cudnn " * (n // 6),
]

H200_REPORT = ROOT / "tests" / "fixtures" / "machines" / "h200" / "collect_env.txt"


def cpu(run: Callable[[], object]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def ordinary_report(size: int) -> str:
    text = H200_REPORT.read_text()
    return (text * (size // len(text) + 1))[:size]


def report() -> tuple[float, float]:
    from olmo_doctor.report import parse_text
    from olmo_doctor.reports import paste

    def read(text: str) -> None:
        paste.unwrap(text)
        parse_text(text)

    lines = [prefix + unit * (200_000 // len(unit)) + tail for prefix in PREFIXES for unit, tail in FILLERS]
    lines += [make(200_000) for make in NEAR_MISSES]
    worst = max(cpu(partial(read, "PyTorch version: 2.6.0\n" + line + "\n")) for line in lines)
    return worst, cpu(lambda: read(ordinary_report(200_000)))


def freeform() -> tuple[float, float]:
    from olmo_doctor.reports import freeform as ff

    patterns = [v for v in vars(ff).values() if isinstance(v, re.Pattern)]
    worst, anchor = 0.0, 0.0
    for pattern in patterns:
        for recipe in recipes(pattern.pattern).values():
            line = build(recipe, 1 << 18)
            took = cpu(partial(pattern.search, line))
            if took > worst:
                worst, anchor = took, cpu(partial(re.findall, r"\w+", line))
    return worst, anchor


def near_lines() -> tuple[float, float]:
    from olmo_doctor.report import load_report

    with tempfile.TemporaryDirectory() as tmp:
        hostile, plain = Path(tmp) / "r.txt", Path(tmp) / "plain.txt"
        hostile.write_text("torch 2.4.0 [GCC 1.1] 8x GPUs A100 x9 torch 2.4 driver 5 nvcc 1.\n" * 20_000)
        plain.write_text(ordinary_report(hostile.stat().st_size))
        return cpu(lambda: load_report(hostile)), cpu(lambda: load_report(plain))


def check() -> tuple[float, float]:
    from typer.testing import CliRunner

    from olmo_doctor.cli import app

    text = H200_REPORT.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        hostile, plain = Path(tmp) / "hostile.txt", Path(tmp) / "plain.txt"
        hostile.write_text(text.replace("GPU 0: NVIDIA H200\n", "GPU 0: NVIDIA H100 " + "[/]" * 333_333 + "\n"))
        plain.write_text(text)
        run = CliRunner().invoke
        run(app, ["check", "--from-report", str(plain)])  # imports and rule loading, paid once
        return (cpu(lambda: run(app, ["check", "--from-report", str(hostile)])),
                cpu(lambda: run(app, ["check", "--from-report", str(plain)])))


def signatures() -> tuple[float, float]:
    from olmo_doctor.rules.model import load_rules

    patterns = [s.pattern for r in load_rules() for s in r.signatures]
    screened = []
    for pattern in patterns:  # at 64 KB a quadratic pattern is already the slowest by far; time the top 5 at 1 MB
        for recipe in recipes(pattern.pattern).values():
            line = build(recipe, 1 << 16)
            screened.append((cpu(partial(pattern.search, line)), pattern, recipe))
    worst, anchor = 0.0, 0.0
    for _, pattern, recipe in sorted(screened, key=lambda row: row[0], reverse=True)[:5]:
        line = build(recipe, 1 << 20)
        took = cpu(partial(pattern.search, line))
        if took > worst:
            worst, anchor = took, cpu(partial(re.findall, r"\w+", line))
    return worst, anchor


def _diagnose_cpu(path: Path) -> float:
    """CPU seconds of `olmo-doctor diagnose PATH --json` in a fresh process (its own and its children's)."""
    code = ("import resource, subprocess, sys; subprocess.run([sys.executable, '-m', 'olmo_doctor', 'diagnose', "
            "sys.argv[1], '--json'], capture_output=True); u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(u.ru_utime + u.ru_stime)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT)
    return float(out.stdout)


def gzip_bomb() -> tuple[float, float]:
    from olmo_doctor.diagnose import reader

    line = b"NCCL INFO building extension, nothing wrong here at all\n"
    with tempfile.TemporaryDirectory() as tmp:
        bomb, capped = Path(tmp) / "bomb.log.gz", Path(tmp) / "capped.log"
        member = gzip.compress(line * 18_000, 9)
        with bomb.open("wb") as out:
            for _ in range(10 * 1024):
                out.write(member)
        cap = min(reader.MAX_READ, max(reader.MAX_DECOMPRESSED, reader.MAX_RATIO * bomb.stat().st_size))
        capped.write_bytes(line * (cap // len(line)))
        return _diagnose_cpu(bomb), _diagnose_cpu(capped)


def shards() -> tuple[float, float]:
    import numpy as np

    from olmo.data import shard_check

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "part-00000.npy"
        np.random.default_rng(0).integers(0, 700, 50_000_000, dtype=np.uint16).tofile(path)
        took = cpu(lambda: shard_check.scan(path, "uint16", True))
        return took, cpu(lambda: (np.fromfile(path, np.uint16).max(), hashlib.sha256(path.read_bytes()).digest()))


BUDGETS: dict[str, tuple[Callable[[], tuple[float, float]], float]] = {
    "report": (report, 1.5), "freeform": (freeform, 0.5), "near-lines": (near_lines, 3.0), "check": (check, 10.0),
    "signatures": (signatures, 4.0), "gzip-bomb": (gzip_bomb, 3.0), "shards": (shards, 2.0),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=sorted(BUDGETS), action="append")
    args = ap.parse_args()
    missed = 0
    print(f"{'name':<11} {'cpu s':>8} {'budget':>7} {'anchor s':>9} {'ratio':>7}  result")
    for name in args.only or BUDGETS:
        measure, budget = BUDGETS[name]
        took, anchor = measure()
        ok = took <= budget
        missed += not ok
        print(f"{name:<11} {took:8.3f} {budget:7.1f} {anchor:9.3f} {took / max(anchor, 1e-6):6.1f}x  "
              f"{'met' if ok else 'MISSED'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
