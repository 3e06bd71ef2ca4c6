"""Bounded input in prepare-data: one huge line (the 2 GiB line in a 2 MB .txt.gz / .jsonl.gz that grew the old
reader to 23.7 GB), a decompression bomb, and Parquet / Arrow files many times larger, all read in bounded memory.
Memory is measured in a child process (its own peak RSS from getrusage), against generous caps; never time.

The huge inputs are made cheaply: gzip members concatenate into one stream, so one 64 MiB member of a single byte
repeated (64 KB compressed) written N times is a file of N x 64 KB that decompresses to N x 64 MiB.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")  # the parquet extra (the dev extra and .ci/run install it)
import pyarrow.parquet as pq  # noqa: E402

from olmo.data.readers import ReadOptions, Sizes, file_tasks  # noqa: E402

MiB = 1 << 20
RUN = """
import atexit, resource, sys
atexit.register(lambda: print("MAXRSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
sys.argv = ["olmo", *sys.argv[1:]]
from olmo_doctor.olmo_clash import olmo_main
olmo_main()
"""


def _olmo(*args: str) -> tuple[int, int, str]:
    """Run `olmo ARGS` in a child process: (exit code, its peak RSS in MiB, stderr). Linux carries a process's
    peak RSS into a child it forks and on through exec (the copied address space's high-water mark), so a child
    of this (large) test process would report at least the test's own peak: the command runs as a grandchild,
    forked from a bare interpreter, and its getrusage peak is its own."""
    launcher = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", launcher, sys.executable, "-c", RUN, *args], capture_output=True,
                          text=True, timeout=600)
    rss = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("MAXRSS"))
    return proc.returncode, rss // 1024, proc.stderr


@functools.cache
def _member() -> bytes:
    return gzip.compress(b"a" * (64 * MiB), compresslevel=9, mtime=0)


def _huge_line_gz(path: Path, mib: int, before: bytes = b"", after: bytes = b"") -> None:
    member = _member()
    with open(path, "wb") as f:
        f.write(gzip.compress(before, mtime=0))
        for _ in range(mib // 64):
            f.write(member)
        f.write(gzip.compress(after, mtime=0))


def test_a_256_mib_json_line_is_passed_over_in_bounded_memory(tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl.gz"
    _huge_line_gz(src, 256, b'{"text": "before"}\n{"text": "', b'"}\n{"text": "after"}\n')
    assert src.stat().st_size < MiB
    code, rss, err = _olmo("prepare-data", "-i", str(src), "-o", str(tmp_path / "o"), "-t", "bundled", "-q",
                           "--workers", "1")
    assert code == 0, err
    assert "skipped 1 document(s) larger than --max-doc-size" in err
    assert rss < 200, f"peak RSS {rss} MiB reading a 256 MiB line"  # whole-line reading needs > 256
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["num_docs"] == 2  # the documents around it are kept


def test_a_256_mib_txt_is_passed_over_without_reading_it_all(tmp_path: Path) -> None:
    src = tmp_path / "big.txt.gz"
    _huge_line_gz(src, 256)
    (tmp_path / "small.txt").write_text("A small document.")
    code, rss, err = _olmo("prepare-data", "-i", str(src), "-i", str(tmp_path / "small.txt"), "-o",
                           str(tmp_path / "o"), "-t", "bundled", "-q", "--workers", "1")
    assert code == 0 and "big.txt.gz: skipped 1 document(s) larger than --max-doc-size" in err, err
    assert rss < 200
    code, _, err = _olmo("prepare-data", "-i", str(src), "-o", str(tmp_path / "x"), "-t", "bundled", "-q")
    assert code == 2 and "larger than --max-doc-size" in err and not (tmp_path / "x").exists()


def test_decompression_is_capped(tmp_path: Path) -> None:
    src = tmp_path / "bomb.jsonl.gz"
    _huge_line_gz(src, 256)
    code, rss, err = _olmo("prepare-data", "-i", str(src), "-o", str(tmp_path / "o"), "-t", "bundled", "-q",
                           "--max-decompressed", "64M")
    assert code == 2 and "decompresses to more than 67,108,864 bytes" in err and "--max-decompressed" in err
    assert len([ln for ln in err.splitlines() if not ln.startswith("MAXRSS")]) == 1 and rss < 200
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["big.txt.gz", "big.jsonl.gz"])
def test_the_2_gib_line_in_a_2_mb_gz(tmp_path: Path, name: str) -> None:
    """The reported attack as it was: defaults refuse or pass over it; raising the cap reads it through."""
    src = tmp_path / name
    _huge_line_gz(src, 2048, *((b'{"text": "', b'"}\n{"text": "after"}\n') if "jsonl" in name else (b"", b"")))
    assert src.stat().st_size < 3 * MiB
    code, rss, err = _olmo("prepare-data", "-i", str(src), "-o", str(tmp_path / "o"), "-t", "bundled", "-q")
    assert code == 2 and rss < 400, err  # jsonl: over the 1 GiB decompression cap; txt: no document left
    if "jsonl" in name:
        code, rss, err = _olmo("prepare-data", "-i", str(src), "-o", str(tmp_path / "o"), "-t", "bundled", "-q",
                               "--max-decompressed", "3G")
        assert code == 0 and "skipped 1 document(s) larger than --max-doc-size" in err and rss < 400, err


def _rows(path: Path, n: int, kind: str) -> None:
    """`n` rows of 64 KiB text each, written a row group / batch at a time (the test process stays small)."""
    schema = pa.schema([("text", pa.string())])
    batch = pa.record_batch([pa.array(["x" * (64 << 10)] * 250)], schema=schema)
    if kind == "parquet":
        with pq.ParquetWriter(path, schema) as w:
            for _ in range(n // 250):
                w.write_batch(batch)
    else:
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, schema) as w:
            for _ in range(n // 250):
                w.write_batch(batch)


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_parquet_and_arrow_memory_does_not_grow_with_the_file(tmp_path: Path, kind: str) -> None:
    peaks = []
    for n in (500, 2000):  # 32 MiB and 128 MiB of text
        src = tmp_path / f"{n}.{kind}"
        _rows(src, n, kind)
        code, rss, err = _olmo("prepare-data", "-i", str(src), "-o", str(tmp_path / "o"), "-t", "bundled",
                               "--dry-run", "--max-doc-size", "1K", "--workers", "1")
        assert code == 1 and "Traceback" not in err, err  # every row over the cap: "no documents", flagged
        peaks.append(rss)
    assert peaks[1] - peaks[0] < 48, f"peak RSS {peaks} MiB for 32 vs 128 MiB of {kind}"


@pytest.mark.parametrize("seed", range(6))
def test_the_line_reader_keeps_exactly_the_lines_under_the_cap(tmp_path: Path, seed: int) -> None:
    """Whatever the block size, lines of up to `cap` bytes (without the line break) are kept whole and in order,
    longer ones are passed over and counted, and record numbers stay the line numbers."""
    r = random.Random(seed)
    cap = 1024
    lengths = [r.choice([0, 1, 5, cap - 1, cap, cap + 1, 2 * cap, 5 * cap, r.randrange(3 * cap)]) for _ in range(300)]
    lines = [bytes([97 + i % 26]) * n for i, n in enumerate(lengths)]
    ending = r.choice([b"\n", b""])
    data = b"\n".join(lines) + ending
    path = tmp_path / ("a.jsonl.gz" if seed % 2 else "a.jsonl")
    path.write_bytes(gzip.compress(data) if seed % 2 else data)
    for block in (64, 333, 1000, 4096):
        tasks = list(file_tasks(0, path, 0, Sizes(block, max(16, block // 4), r.randrange(2000)), None,
                                ReadOptions(max_doc=cap)))
        kept = {t.first_line + k: line for t in tasks for k, line in enumerate(t.data.split(b"\n")) if line}
        assert kept == {n: line for n, line in enumerate(lines, 1) if line and len(line) <= cap}, block
        assert sum(t.oversized for t in tasks) == sum(len(line) > cap for line in lines), block
        assert all(len(t.data) <= 2 * cap + block for t in tasks)  # no task holds more than it must


def test_a_dictionary_bomb_parquet_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """One 1 MiB value used by 4096 rows: a small file whose column decodes to 4 GiB (its metadata says ~1 MiB).
    The values are over --max-doc-size, so none is tokenized (a 1 MiB word takes a BPE tokenizer minutes): the cap
    counts decoded bytes from the lengths alone."""
    value = pa.array(["x" * MiB])
    column = pa.DictionaryArray.from_arrays(pa.array([0] * 4096, pa.int32()), value)
    pq.write_table(pa.table({"text": column}), tmp_path / "bomb.parquet", row_group_size=4096)
    assert (tmp_path / "bomb.parquet").stat().st_size < 2 * MiB
    code, rss, err = _olmo("prepare-data", "-i", str(tmp_path / "bomb.parquet"), "-o", str(tmp_path / "o"), "-t",
                           "bundled", "-q", "--workers", "1", "--max-doc-size", "512K")
    assert code == 2 and "decompresses to more than 1,073,741,824 bytes" in err and rss < 400, (rss, err)
    assert not (tmp_path / "o").exists()
