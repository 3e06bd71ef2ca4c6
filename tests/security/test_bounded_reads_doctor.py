"""Attacks on olmo-doctor's readers: FIFOs that would block forever, files of gigabytes, a decompression header that
asks for 1.5 GiB. Each must be refused in one line, without hanging and without its size in memory.

All attacks run in one child process (a hang fails the test at the child's timeout, never the pytest run); after
each, the child records how far its peak RSS rose. The big files are sparse (3 GiB that take no disk): read whole,
each would cost its size in memory, as it did before the bounded reader (3-6 GB, 1.2 GB for the xz header).
"""

from __future__ import annotations

import json
import lzma
import os
import tarfile
from pathlib import Path

import pytest
from _bounds_measure import child_python

GIB = 1 << 30
MB = 1 << 20

_CHILD = r"""
    import json, resource, sys, traceback
    from pathlib import Path
    from types import SimpleNamespace

    from olmo_doctor.build import cache, source
    from olmo_doctor.diagnose import diagnose_file
    from olmo_doctor.fix import journal_key
    from olmo_doctor.fix.journal import Journal
    from olmo_doctor.fleet.cli import compare_reports
    from olmo_doctor.report import load_report

    t = Path(sys.argv[1])
    plan = SimpleNamespace(package="flash-attn", cache_digest="abc", cache_key={"k": 1})

    def unpack():
        source._unpack(t / "xz-inside.tar.gz", t / "unpacked")

    def lock():
        with Journal(t / "lockproj").lock():
            pass

    ATTACKS = {
        "report fifo": lambda: load_report(t / "fifo"),
        "report folder with a fifo": lambda: load_report(t / "reports"),
        "report 3 GiB": lambda: load_report(t / "big.txt"),
        "report /dev/zero": lambda: load_report("/dev/zero"),
        "compare fifo": lambda: compare_reports([t / "fifo", t / "fifo2"], "all", True),
        "diagnose fifo": lambda: diagnose_file(t / "fifo"),
        "diagnose xz 1.5 GiB dictionary": lambda: diagnose_file(t / "dict.log.xz"),
        "journal lock fifo": lock,
        "journal manifest 3 GiB": lambda: Journal(t / "bigproj").load("0001-20260101-000000"),
        "journal manifest fifo": lambda: Journal(t / "fifoproj").load("0001-20260101-000000"),
        "journal key fifo": journal_key._key,
        "wheel cache key.json fifo": lambda: cache.find(plan, t / "cache-fifo"),
        "wheel cache key.json 3 GiB": lambda: cache.find(plan, t / "cache-big"),
        "wheel cache record fifo": lambda: cache.recorded_sha256(t / "cache-rec" / plan.package / "abc" / "x.whl"),
        "sdist xz inside a .tar.gz": unpack,
    }
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {}
    for name, attack in ATTACKS.items():
        try:
            result = {"returned": repr(attack())[:300]}
        except Exception as e:  # noqa: BLE001 - every refusal is recorded by type and message
            result = {"error": type(e).__name__, "message": str(e)[:500], "trace": traceback.format_exc()[-600:]}
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["rss_rise_mb"] = (peak - base) / 1024
        base = max(base, peak)
        out[name] = result
    print(json.dumps(out))
"""


def _sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


def _xz_with_huge_dictionary(text: bytes) -> bytes:
    return lzma.compress(text, format=lzma.FORMAT_XZ, filters=[{"id": lzma.FILTER_LZMA2, "dict_size": 1536 * MB}])


@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    t = tmp_path_factory.mktemp("attacks")
    os.mkfifo(t / "fifo")
    os.mkfifo(t / "fifo2")
    (t / "reports").mkdir()
    os.mkfifo(t / "reports" / "node1.json")
    _sparse(t / "big.txt", 3 * GIB)
    (t / "dict.log.xz").write_bytes(_xz_with_huge_dictionary(b"OSError: [Errno 28] No space left on device\n"))
    (t / "lockproj" / ".olmo-doctor" / "journal").mkdir(parents=True)
    os.mkfifo(t / "lockproj" / ".olmo-doctor" / "journal" / ".lock")
    entry = "0001-20260101-000000"
    _sparse(t / "bigproj" / ".olmo-doctor" / "journal" / entry / "manifest.json", 3 * GIB)
    (t / "fifoproj" / ".olmo-doctor" / "journal" / entry).mkdir(parents=True)
    os.mkfifo(t / "fifoproj" / ".olmo-doctor" / "journal" / entry / "manifest.json")
    (t / "state" / "olmo-doctor").mkdir(parents=True)
    os.mkfifo(t / "state" / "olmo-doctor" / "journal.key")
    for name, make in (("cache-fifo", os.mkfifo), ("cache-big", lambda p: _sparse(p, 3 * GIB))):
        (t / name / "flash-attn" / "abc").mkdir(parents=True)
        make(t / name / "flash-attn" / "abc" / "key.json")
    (t / "cache-rec" / "flash-attn" / "abc").mkdir(parents=True)
    os.mkfifo(t / "cache-rec" / "flash-attn" / "abc" / "record.json")
    inner = t / "inner.tar"
    with tarfile.open(inner, "w") as tar:
        tar.add(t / "dict.log.xz", arcname="pkg/setup.py")
    (t / "xz-inside.tar.gz").write_bytes(_xz_with_huge_dictionary(inner.read_bytes()))
    env_state = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(t / "state")
    try:
        got = child_python(_CHILD, str(t))
    finally:
        if env_state is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = env_state
    assert got["result"] is not None, got["err"]
    return dict(got["result"])


# attack -> (exception type, words its one-line message must hold)
EXPECTED = {
    "report fifo": ("UsageError", "FIFO (named pipe), not a regular file"),
    "report folder with a fifo": ("UsageError", "FIFO (named pipe), not a regular file"),
    "report 3 GiB": ("UsageError", "3 GiB, larger than 16 MiB, the most a report can be"),
    "report /dev/zero": ("UsageError", "character device, not a regular file"),
    "compare fifo": ("UsageError", "FIFO (named pipe)"),
    "diagnose fifo": ("UsageError", "pipe it to standard input instead"),
    "diagnose xz 1.5 GiB dictionary": ("UsageError", "asks for more than 128 MiB of memory"),
    "journal lock fifo": ("UsageError", ".lock"),
    "journal manifest 3 GiB": ("JournalError", "larger than 4 MiB, the most a journal manifest can be"),
    "journal manifest fifo": ("JournalError", "not a regular file"),
    "journal key fifo": ("UsageError", "FIFO (named pipe)"),
    "sdist xz inside a .tar.gz": ("UsageError", "cannot be unpacked safely"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_attack_is_refused_in_one_line(attacks: dict[str, dict[str, object]], name: str) -> None:
    got = attacks[name]
    kind, words = EXPECTED[name]
    assert got.get("error") == kind, got
    message = str(got["message"])
    assert words in message and "\n" not in message, message


@pytest.mark.parametrize("name", ["wheel cache key.json fifo", "wheel cache key.json 3 GiB",
                                  "wheel cache record fifo"])
def test_a_hostile_wheel_cache_entry_is_a_miss(attacks: dict[str, dict[str, object]], name: str) -> None:
    assert attacks[name].get("returned") in ("(None, None)", "None"), attacks[name]


def test_no_attack_costs_its_size_in_memory(attacks: dict[str, dict[str, object]]) -> None:
    # 3 GiB files and a 1.5 GiB dictionary: reading or allocating any of them moves the peak by gigabytes
    rises = {name: float(r["rss_rise_mb"]) for name, r in attacks.items()}  # type: ignore[arg-type]
    assert max(rises.values()) < 64, json.dumps(rises, indent=1)
