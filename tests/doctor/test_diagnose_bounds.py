"""`diagnose` stays bounded on hostile input: huge lines, huge logs, compression bombs, escape storms.

What is cut is said in the output (text and --json `input_cut`); what is kept (the head and tail of a line, the
head and tail of a log) still names the root cause with the right line numbers.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import lzma
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from olmo_doctor.cli import app
from olmo_doctor.diagnose import Diagnosis, diagnose
from olmo_doctor.diagnose import reader as R
from olmo_doctor.diagnose import window as W
from olmo_doctor.diagnose.reader import iter_chunks
from tests._adversarial import write_adversarial_log
from tests.helpers import ROOT
from tests.scaling import BOUND, GROWTH

DISK = b"OSError: [Errno 28] No space left on device\n"
OOM = b"c++: fatal error: Killed signal terminated program cc1plus\n"


def run(path: Path) -> Diagnosis:
    return diagnose(iter_chunks(path))


def first_line_of(diag: Diagnosis, code: str) -> int:
    return next(f.matched_lines[0].line for f in diag.findings if f.code == code)


def test_a_huge_line_keeps_its_head_and_tail(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"start\n" + b"progress " * 600_000 + DISK + b"next\n" + OOM)
    diag = run(log)
    assert first_line_of(diag, "OD230") == 2  # the error at the end of the 5 MB line
    quote = next(f.matched_lines[0].text for f in diag.findings if f.code == "OD230")
    assert "No space left on device" in quote and len(quote) <= 400  # quoted around the match
    assert first_line_of(diag, "OD210") == 4  # line numbers after it are right
    assert diag.cuts.long_lines == 1 and diag.cuts.first_long_line == 2
    assert diag.cuts.long_bytes > 5_000_000
    assert any("shortened" in s for s in diag.cuts.sentences())


def test_many_long_lines_in_one_chunk_are_all_cut(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes((b"a" * 50_000 + b"\n") * 30 + OOM)
    diag = run(log)
    assert diag.cuts.long_lines == 30 and diag.cuts.first_long_line == 1
    assert first_line_of(diag, "OD210") == 31
    assert diag.size < 30 * (W.LINE_MAX + 100) + 100


def test_the_middle_of_a_huge_log_is_skipped_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "BLOCK", 64 << 10)
    monkeypatch.setattr(W, "SCAN_HEAD", 256 << 10)
    monkeypatch.setattr(W, "SCAN_TAIL", 256 << 10)
    filler = b"compiling kernel number 12345 of many\n"  # 38 bytes
    n = 30_000  # about 1.1 MB on each side of the middle cause
    log = tmp_path / "big.log"
    cuda_oom = b"RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"
    log.write_bytes(OOM + filler * n + DISK + filler * n + cuda_oom)
    diag = run(log)
    codes = [f.code for f in diag.findings]
    assert "OD210" in codes and "OD255" in codes and "OD230" not in codes  # head and tail seen, middle not
    assert first_line_of(diag, "OD255") == 2 * n + 3
    cuts = diag.cuts
    assert cuts.skipped_bytes > 1_000_000 and 0 < cuts.skipped_from < n + 2 < cuts.skipped_from + cuts.skipped_lines
    assert diag.lines == 2 * n + 3


def _bomb(compress: Callable[[bytes], bytes], megabytes_of_text: int) -> bytes:
    """Concatenated members, each 1 MB of text compressed: every reader inflates them all in sequence."""
    member = compress(b"building extension, nothing wrong here\n" * 27_000)
    return member * megabytes_of_text


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bz2", "xz"])
def test_a_compression_bomb_stops_at_the_cap(compress: Callable[[bytes], bytes], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "MAX_DECOMPRESSED", 4 << 20)
    log = tmp_path / "bomb.log.z"
    log.write_bytes(_bomb(compress, 200))
    diag = run(log)
    assert diag.cuts.stopped_at and diag.size <= (4 << 20) + R.BLOCK
    assert "expands further" in diag.cuts.stop_reason
    assert any("reading stopped" in s for s in diag.cuts.sentences())


def test_a_small_compressed_log_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "x.log.xz"
    log.write_bytes(lzma.compress(b"ok\n" * 1000 + DISK))
    diag = run(log)
    assert not diag.cuts and first_line_of(diag, "OD230") == 1001


def test_an_unterminated_escape_does_not_swallow_the_next_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"\x1b]0;a title that never ends\n" + DISK + b"\x1b[" + b"1;" * 5000 + b"\n" + OOM)
    diag = run(log)
    assert first_line_of(diag, "OD230") == 2 and first_line_of(diag, "OD210") == 4


def test_an_escape_storm_on_one_line(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    storm = b"\x1b[2K\x1b[1G\x1b[32m 45%|####   |\x1b[0m\r"
    log.write_bytes(storm * 1_000_000 + b"\n" + OOM)
    diag = run(log)
    assert first_line_of(diag, "OD210") == 2
    assert diag.cuts.long_lines == 1


def test_the_cut_is_noted_in_text_and_json(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    log = tmp_path / "x.log"
    log.write_bytes(b"x" * 100_000 + b"\n" + OOM)
    res = CliRunner().invoke(app, ["diagnose", str(log), "--json"])
    cut = json.loads(res.stdout)["input_cut"]
    assert cut["long_lines"] == 1 and cut["first_long_line"] == 1 and cut["notes"]
    res = CliRunner().invoke(app, ["diagnose", str(log)])
    assert "Input cut:" in res.stdout and "shortened" in res.stdout


# The measured run: a fresh interpreter whose only child is the diagnose process, so RUSAGE_CHILDREN is its own.
_MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "olmo_doctor", "diagnose", sys.argv[1], "--json"],
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"rc": out.returncode, "wall": wall, "cpu": use.ru_utime + use.ru_stime,
                      "rss_mb": use.ru_maxrss / 1024, "out": out.stdout, "err": out.stderr[-2000:]}))
""")


def _measure(path: Path) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True, text=True, cwd=ROOT)
    return json.loads(res.stdout)


@pytest.mark.slow
def test_48_mb_of_adversarial_text_in_linear_time_and_500_mb(tmp_path: Path) -> None:
    """4 times the hostile log costs about 4 times the CPU time, not 16 (the seconds are bench/diagnose_speed.py
    --hostile's budget, measured against its anchor)."""
    small, log = tmp_path / "small.log", tmp_path / "hostile.log"
    write_adversarial_log(small, 12)
    write_adversarial_log(log, 12 * GROWTH)
    base, got = _measure(small), _measure(log)
    assert got["rc"] == 1, got["err"]
    report = json.loads(got["out"])
    assert "OD210" in [f["code"] for f in report["findings"]]  # the real cause at the end is still found
    assert report["input_cut"]["long_lines"] >= 1
    assert got["cpu"] <= BOUND * base["cpu"], (base, got)  # CPU time: other work on the box does not count
    assert got["rss_mb"] < 500, got


@pytest.mark.slow
def test_a_10_gib_gzip_bomb_reads_a_bounded_amount_in_500_mb(tmp_path: Path) -> None:
    log = tmp_path / "bomb.log.gz"
    member = gzip.compress(b"NCCL INFO building extension, nothing wrong here at all\n" * 18_000, 9)
    with log.open("wb") as out:
        for _ in range(10 * 1024):  # 10 GiB of text from ~10 MB on disk
            out.write(member)
    got = _measure(log)
    report = json.loads(got["out"])
    # the work is counted, not timed: reading stops at the cap on decompressed text
    cap = min(R.MAX_READ, max(R.MAX_DECOMPRESSED, R.MAX_RATIO * log.stat().st_size))
    assert 0 < report["input_cut"]["stopped_at"] <= cap, got["err"]
    assert got["rss_mb"] < 500, got


def test_text_from_a_caller_gets_the_same_bounds() -> None:
    diag = diagnose(["\x1b[31m" + "x" * 3_000_000 + " No space left on device\x1b[0m\nok\n", OOM.decode()])
    assert first_line_of(diag, "OD230") == 1 and first_line_of(diag, "OD210") == 3
    assert diag.cuts.long_lines == 1 and diag.size < W.LINE_MAX + 200


def _expected(text: bytes) -> bytes:
    """Each line longer than LINE_MAX as its head, the marker and its tail."""
    out = []
    for line in text.split(b"\n"):
        if len(line) > W.LINE_MAX:
            line = line[: W.LINE_HEAD] + W._marker(len(line) - W.LINE_HEAD - W.LINE_TAIL) + line[-W.LINE_TAIL :]
        out.append(line)
    return b"\n".join(out)


@pytest.mark.parametrize("seed", range(12))
def test_lines_cuts_exactly_the_long_lines_whatever_the_blocks(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    monkeypatch.setattr(W, "LINE_HEAD", 8)
    monkeypatch.setattr(W, "LINE_TAIL", 4)
    monkeypatch.setattr(W, "LINE_MAX", 12)
    rnd = random.Random(seed)
    text = b"\n".join(b"x" * rnd.choice([0, 1, 5, 11, 12, 13, 30, 200]) + str(i).encode() for i in range(60))
    if rnd.random() < 0.5:
        text += b"\n"
    cuts = [0, *sorted(rnd.sample(range(1, len(text)), 8)), len(text)]
    blocks = [text[a:b] for a, b in itertools.pairwise(cuts)]
    got = W.Cuts()
    out = b"".join(p for p in W.lines(blocks, got) if isinstance(p, bytes))
    assert out == _expected(text)
    long = [i + 1 for i, line in enumerate(text.split(b"\n")) if len(line) > 12]
    assert got.long_lines == len(long) and (not long or got.first_long_line == long[0])


@pytest.mark.parametrize("seed", range(8))
def test_window_skips_whole_lines_and_counts_them(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    text = b"".join(b"y" * rnd.randint(0, 40) + b"\n" for _ in range(400))
    cuts = [0, *sorted(rnd.sample(range(1, len(text)), 20)), len(text)]
    blocks = [text[a:b] for a, b in itertools.pairwise(cuts)]
    pieces = list(W.window(blocks, head=1000, tail=2000))
    gaps = [p for p in pieces if isinstance(p, W.Gap)]
    kept = [p for p in pieces if isinstance(p, bytes)]
    assert len(gaps) == 1
    gap, at = gaps[0], pieces.index(gaps[0])
    head, tail = b"".join(kept[:at]), b"".join(kept[at:])
    assert head.endswith(b"\n") and len(head) >= 1000 - 41
    assert len(tail) <= 2000 + max(len(b) for b in blocks)
    skipped = text[len(head) : len(head) + gap.size]
    assert head + skipped + tail == text  # head, gap and tail are the text, in order
    assert skipped.endswith(b"\n") and skipped.count(b"\n") == gap.lines  # whole lines, counted


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bz2", "xz"])
def test_a_cut_compressed_log_is_read_up_to_the_break(compress: Callable[[bytes], bytes], tmp_path: Path) -> None:
    import random

    rnd = random.Random(0)  # text that does not compress to nothing, so the cut loses little of it
    noise = b"".join(b"step %d loss %.5f\n" % (i, rnd.random()) for i in range(100_000))
    early = b"".join(noise.splitlines(keepends=True)[:20_000])
    data = compress(early + DISK + noise)
    log = tmp_path / "cut.log.z"
    log.write_bytes(data[: len(data) * 3 // 4])  # a download or a copy that broke off
    diag = run(log)
    assert first_line_of(diag, "OD230") == 20_001
    assert diag.cuts.stopped_at and "damaged" in diag.cuts.stop_reason


def test_a_flood_of_one_near_miss_switches_to_whole_chunk_search(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A million unique near misses of one message go to the whole-chunk search; real lines among them (even
    behind a tool prefix, with a progress redraw) are still found on their own line numbers."""
    from olmo_doctor.diagnose import scan as S

    monkeypatch.setattr(R, "BLOCK", 64 << 10)
    monkeypatch.setattr(S, "BULK_LINES", 100)
    lines = [f"[rank{i % 8}] step {i} RuntimeError: NCCL error in: x{i}" for i in range(6000)]
    lines[3999] = "RuntimeError: NCCL error in: ../ProcessGroupNCCL.cpp:825, unhandled system error"
    lines[5499] = "      │ 10%\rRuntimeError: NCCL error in: ../c10d/NCCLUtils.hpp:219, internal error"
    log = tmp_path / "flood.log"
    log.write_text("\n".join(lines) + "\n")
    bulk_chunks = []
    real_bulk = S.Scanner._bulk

    def spy(self: S.Scanner, text: bytes, line0: int) -> Iterator[S.Hit]:
        bulk_chunks.append(line0)
        return real_bulk(self, text, line0)

    monkeypatch.setattr(S.Scanner, "_bulk", spy)
    diag = run(log)
    assert len(bulk_chunks) >= 3  # the whole-chunk search did the work
    found = next(f for f in diag.findings if f.code == "OD228")
    assert [m.line for m in found.matched_lines] == [4000, 5500]
    assert found.matched_lines[1].text.startswith("RuntimeError: NCCL error in: ../c10d")


def test_a_line_longer_than_the_head_is_cut_by_the_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "BLOCK", 64 << 10)
    monkeypatch.setattr(W, "SCAN_HEAD", 256 << 10)
    monkeypatch.setattr(W, "SCAN_TAIL", 256 << 10)
    filler = b"compiling kernel number 12345 of many\n"
    log = tmp_path / "big.log"
    log.write_bytes(OOM + b"x" * 1_000_000 + b"\n" + filler * 30_000 + DISK)
    diag = run(log)
    assert first_line_of(diag, "OD210") == 1 and first_line_of(diag, "OD230") == 30_003
    assert diag.cuts.long_lines == 1 and diag.cuts.skipped_from == 3 and diag.lines == 30_003


def test_reading_stops_at_the_total_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "BLOCK", 64 << 10)
    monkeypatch.setattr(R, "MAX_READ", 1 << 20)
    log = tmp_path / "endless.log"
    log.write_bytes(OOM + b"still going, all fine\n" * 150_000 + DISK)  # 3.3 MB
    diag = run(log)
    assert first_line_of(diag, "OD210") == 1 and "OD230" not in [f.code for f in diag.findings]
    assert diag.cuts.stopped_at == 1 << 20 and diag.cuts.stop_reason == "the log is longer"
    assert any("tail -c" in s for s in diag.cuts.sentences())  # says how to give the end instead
