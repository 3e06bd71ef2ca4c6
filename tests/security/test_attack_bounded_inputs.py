"""Attacks on memory and time through the inputs each entry point reads, in formats and places no other test
here uses: a 1 GiB single line inside a multi-member .gz, a multi-frame .zst, and a plain sparse .txt given to
prepare-data; 1 GiB logs as .bz2 / .xz / multi-member .gz for diagnose; an input folder holding symlink loops;
/dev/zero and FIFOs where a file or a tokenizer goes; /dev/zero on standard input for `diagnose -` and
`check --from-report -`; a report nested 200,000 deep; a `--set` value nested 20,000 deep; YAML tags that would
construct Python objects; `build-kernels --source /dev/zero`.

Each runs the real command in a measured child (tests/security/_bounds_measure.py): it must end with a one-line
refusal (exit 2) or a bounded result, and its peak memory must stay far below the attack's size. The big
payloads are tiny on disk: concatenated compressed members of one 16 MiB chunk, or sparse files. Sources: gzip
(RFC 1952 members), zstd frames and bzip2 / xz streams may each be concatenated and decoders must continue;
symlink loops as `find -L` meets them; the red-team classes "decompression bombs in every compressed format we
read", "huge single lines", "FIFOs and /dev/zero", "symlink loops".
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _bounds_measure import child_run

MIB = 1 << 20
CHUNK = b"a" * (16 * MIB)  # 64 members of it: 1 GiB decompressed


def _members(compress: object, n: int = 64) -> bytes:
    return compress(CHUNK) * n  # type: ignore[operator]


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import zstandard

    t = tmp_path_factory.mktemp("bounded")
    for name, data in (("gz/a.txt.gz", _members(lambda b: gzip.compress(b, 1))),
                       ("zst/a.jsonl.zst", zstandard.ZstdCompressor().compress(b'{"text": "') +
                        _members(zstandard.ZstdCompressor().compress)),
                       ("d.log.bz2", _members(bz2.compress)), ("d.log.xz", _members(lzma.compress)),
                       ("d.log.gz", _members(lambda b: gzip.compress(b, 1)))):
        (t / name).parent.mkdir(parents=True, exist_ok=True)
        (t / name).write_bytes(data)
    (t / "plain").mkdir()
    with (t / "plain" / "a.txt").open("wb") as f:  # a 1 GiB line of NULs, no newline
        f.write(b"x")
        f.truncate(1 << 30)
    loop = t / "loop"
    loop.mkdir()
    (loop / "a.txt").write_text("hello world\n" * 20)
    (loop / "self").symlink_to(".")
    (loop / "up").symlink_to("..")
    (loop / "x").symlink_to("y")
    (loop / "y").symlink_to("x")  # a two-link cycle: resolving it fails with ELOOP
    os.mkfifo(t / "fifo.jsonl")
    (t / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (t / "evil.yaml").write_text('run_dir: !!python/object/apply:os.system ["touch MARKER"]\n'
                                 "model: !!python/name:os.system\n")
    return t


def _cases(t: Path) -> dict[str, tuple[list[str], str]]:
    o = t / "out"
    return {
        "prepare .gz members, 1 GiB line": (["olmo", "prepare-data", "-i", f"{t}/gz", "-o", f"{o}1", "-t",
                                              "bundled"], "--max-doc-size"),
        "prepare .zst frames, 1 GiB": (["olmo", "prepare-data", "-i", f"{t}/zst", "-o", f"{o}2", "-t", "bundled"],
                                       "decompresses to more than"),
        "prepare sparse 1 GiB line": (["olmo", "prepare-data", "-i", f"{t}/plain", "-o", f"{o}3", "-t",
                                       "bundled"], "--max-doc-size"),
        "prepare /dev/zero input": (["olmo", "prepare-data", "-i", "/dev/zero", "-o", f"{o}4", "-t", "bundled"],
                                    "not a regular file"),
        "prepare fifo input": (["olmo", "prepare-data", "-i", f"{t}/fifo.jsonl", "-o", f"{o}5", "-t", "bundled"],
                               "not a regular file"),
        "prepare /dev/zero tokenizer": (["olmo", "prepare-data", "-i", f"{t}/loop/a.txt", "-o", f"{o}6", "-t",
                                         "/dev/zero"], "tokenizer"),
        "diagnose 1 GiB .bz2": (["olmo-doctor", "diagnose", f"{t}/d.log.bz2"], ""),
        "diagnose 1 GiB .xz": (["olmo-doctor", "diagnose", f"{t}/d.log.xz"], ""),
        "diagnose 1 GiB .gz members": (["olmo-doctor", "diagnose", f"{t}/d.log.gz"], ""),
        "report nested 200,000 deep": (["olmo-doctor", "check", "--from-report", f"{t}/deep.json"], "deep.json"),
        "compare a folder of loops": (["olmo-doctor", "compare", f"{t}/loop"], "holds no report files"),
        "build-kernels --source /dev/zero": (["olmo-doctor", "build-kernels", "--source", "/dev/zero",
                                              "--dry-run"], "not a regular file"),
        "recipe with python tags": (["olmo", "train", f"{t}/evil.yaml", "--dry-run"], "os.system"),
        "--set nested 20,000 deep": (["olmo", "train", "olmo2_60m", "--dry-run", "--set",
                                      "run_dir=" + "[" * 20_000 + "]" * 20_000], "nested too deeply"),
    }


_SLOW = {"--set nested 20,000 deep"}  # the recipe resolution it waits on costs ~6 s on a 2-core box
CASES = [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in _cases(Path("/x"))]


@pytest.mark.parametrize("name", CASES)
def test_the_input_costs_far_less_than_its_size(name: str, box: Path) -> None:
    argv, words = _cases(box)[name]
    got = child_run(argv, cwd=box)
    err = [ln for ln in got["err"].splitlines() if ln.strip()]
    assert "Traceback" not in got["err"], got["err"]
    assert got["rss_mb"] < 700, f"{name}: peak {got['rss_mb']:.0f} MB"
    if words:  # a refusal: one line naming what is wrong
        assert got["rc"] == 2 and len(err) == 1 and words in err[0], got
    else:  # diagnose: a verdict on what it scanned, within its byte budget
        assert got["rc"] in (0, 1), got
    assert not (box / "MARKER").exists()


@pytest.mark.parametrize("argv", [["diagnose", "-"], ["check", "--from-report", "-"]], ids=["diagnose", "report"])
def test_an_endless_standard_input_is_refused_not_read_forever(argv: list[str], tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        proc = subprocess.run([str(Path(sys.executable).parent / "olmo-doctor"), *argv], stdin=zero,
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
