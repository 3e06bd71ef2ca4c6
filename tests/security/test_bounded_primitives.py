"""olmo_common.bounded's pieces on their own: what they refuse, and that real files of each kind still pass.

Attacks here: a FIFO, a device, a socket and a folder where a file is expected; a file one byte past its cap; a
JSON array of more objects than allowed; YAML nested past the depth bound, a scalar past its bound, an alias
bomb; a repr of a value with a billion leaves; an xz stream whose header asks for 1.5 GiB.
"""

from __future__ import annotations

import io
import lzma
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from olmo_common.bounded import CAPS, DataRefused, ReadRefused, parse_json, parse_yaml, read_bytes, read_lines, shown
from olmo_common.bounded.decompress import TooMuchMemory, decompressed
from olmo_common.bounded.files import open_regular

MB = 1 << 20


def test_a_file_at_its_cap_is_read_and_one_byte_more_is_refused_by_its_size(tmp_path: Path) -> None:
    ok = tmp_path / "ok"
    ok.write_bytes(b"x" * CAPS["checkpoint pointer"])
    assert len(read_bytes(ok, "checkpoint pointer")) == CAPS["checkpoint pointer"]
    big = tmp_path / "big"
    big.write_bytes(b"x" * (CAPS["checkpoint pointer"] + 1))
    with pytest.raises(ReadRefused) as e:
        read_bytes(big, "checkpoint pointer")
    assert str(e.value) == f"{big}: 4.0 KiB, larger than 4 KiB, the most a checkpoint pointer can be"


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "folder"])
def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "thing"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would wait forever
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif kind == "folder":
        path.mkdir()
    else:
        path = Path("/dev/zero")
    if kind == "socket":
        with pytest.raises(OSError):  # a socket cannot even be opened as a file (ENXIO)
            read_bytes(path, "report")
        sock.close()
        return
    with pytest.raises(ReadRefused, match="not a regular file"):
        read_bytes(path, "report")


def test_a_symlink_is_refused_only_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("x")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_bytes(link, "env file") == b"x"
    with pytest.raises(OSError):
        read_bytes(link, "env file", follow=False)


def test_overlong_lines_are_cut_and_the_rest_streamed(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n' + b"y" * (3 * MB) + b'\n{"step": 2}\n')
    lines = list(read_lines(path, "metrics line"))
    assert lines[0] == b'{"step": 1}\n' and lines[-1] == b'{"step": 2}\n' and len(lines) == 3
    assert len(lines[1]) == CAPS["metrics line"] + 1  # cut, so a caller tells it from a record


def test_json_with_more_objects_than_allowed_is_refused_while_parsing() -> None:
    data = "[" + ",".join(['{"file": "x"}'] * 1000) + "]"
    assert len(parse_json(data, "m.json", max_objects=1000)) == 1000
    with pytest.raises(DataRefused, match="more than 999 objects"):
        parse_json(data, "m.json", max_objects=999)
    with pytest.raises(DataRefused, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(ValueError):
        parse_json("{not json", "bad.json")


def test_yaml_within_bounds_loads_as_the_safe_loader_would() -> None:
    text = "base: &b {lr: 0.001, steps: 10}\nrun:\n  <<: *b\n  steps: 20\nlist: [1, 2.5, null, true, 'a']\n"
    assert parse_yaml(text, "r.yaml") == {"base": {"lr": 0.001, "steps": 10}, "run": {"lr": 0.001, "steps": 20},
                                          "list": [1, 2.5, None, True, "a"]}
    assert parse_yaml("", "empty.yaml") is None


@pytest.mark.parametrize(("text", "words"), [
    ("a: " + "[" * 100 + "]" * 100, "nested too deeply (more than 64 levels)"),
    ("a: " + "[" * 20_000 + "]" * 20_000, "nested too deeply"),
    ("a: " + "x" * 70_000, "holds a value of 70,000 characters"),
    ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [" + ", ".join(["*a"] * 10) + "]\nc: &c ["
     + ", ".join(["*b"] * 10) + "]\nd: &d [" + ", ".join(["*c"] * 10) + "]\ne: [" + ", ".join(["*d"] * 10) + "]",
     "expands to more than 100,000 values"),
    ("a: &a [1, *a]", "refers to a value containing itself"),  # walking it would never end
    ("a0: &a0 " + "[" * 40 + "1" + "]" * 40 + "\n" + "".join(  # each alias adds 40 levels to the one it names
        f"a{i}: &a{i} " + "[" * 40 + f"*a{i - 1}" + "]" * 40 + "\n" for i in range(1, 5)), "nested too deeply"),
])
def test_yaml_past_a_bound_is_refused_in_one_line(text: str, words: str) -> None:
    with pytest.raises(DataRefused) as e:
        parse_yaml(text, "r.yaml")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_shown_is_short_whatever_the_value_holds() -> None:
    bomb = parse_yaml("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [" + ", ".join(["*a"] * 9) + "]", "ok.yaml")
    value: object = bomb
    for _ in range(8):  # a billion leaves, shared: walking it would never end
        value = [value] * 9
    text = shown(value)
    assert len(text) <= 80 and text.startswith("[")
    assert shown("z" * 10_000).startswith("'zzz") and len(shown("z" * 10_000)) <= 80


def _xz(data: bytes, dict_size: int) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_XZ, filters=[{"id": lzma.FILTER_LZMA2, "dict_size": dict_size}])


def test_xz_streams_decode_in_sequence_within_the_memory_limit() -> None:
    text = b"".join(b"line %d\n" % i for i in range(50_000))
    joined = _xz(text, 8 * MB) + b"\0" * 8 + _xz(b"second stream\n", 1 * MB)  # cat a.xz b.xz, with padding
    assert decompressed(io.BytesIO(joined), "xz").read() == text + b"second stream\n"


def test_an_xz_header_asking_for_a_huge_dictionary_is_refused_before_it_is_allocated() -> None:
    with pytest.raises(TooMuchMemory, match="asks for more than 128 MiB"):
        decompressed(io.BytesIO(_xz(b"hello\n", 1536 * MB)), "xz").read()


def test_open_regular_streams_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc" * 1000)
    with open_regular(path) as f:
        assert f.read() == b"abc" * 1000


READ_UNDER_A_LIMIT = """
import re, resource, sys
from olmo_common.bounded import read_bytes
peak = int(re.search(r"VmPeak:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (peak + 64 * 2**20, resource.RLIM_INFINITY))
print(len(read_bytes(sys.argv[1], "checkpoint index")), len(read_bytes("/proc/self/status", "cache entry")))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (VmPeak)")
def test_a_small_file_of_a_large_kind_is_read_without_asking_for_its_cap(tmp_path: Path) -> None:
    """A 1 KiB file whose kind may hold 256 MiB is read in a process with 64 MiB of address space to spare: the
    read asks for what the file holds, not for its cap (the error path of a process under `ulimit -v` reads small
    files too). A /proc file, which reports no size, is read whole all the same."""
    small = tmp_path / ".metadata"
    small.write_bytes(b"x" * 1024)
    out = subprocess.run([sys.executable, "-c", READ_UNDER_A_LIMIT, str(small)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    metadata, status = (int(n) for n in out.stdout.split())
    assert metadata == 1024 and status > 100


def test_a_file_that_reports_no_size_is_still_refused_past_its_cap() -> None:
    with pytest.raises(ReadRefused):
        read_bytes("/proc/self/status", "cache entry", limit=64)
