"""Attacks through a `--source` sdist archive (issue #12): every member is checked before a byte is written, so an
archive cannot write outside its staging folder, plant a link or device, or fill the disk; each refusal is one
UsageError and leaves no staging folder behind."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from olmo_doctor.build.source import MAX_UNPACKED, _unpack
from olmo_doctor.errors import UsageError


def _tar(path: Path, members: list[tuple[str, str, object]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "dev": tarfile.CHRTYPE,
                         "fifo": tarfile.FIFOTYPE, "dir": tarfile.DIRTYPE}[kind]
            if isinstance(data, str):
                info.linkname = data
            tar.addfile(info)
    return path


def hostile(outside: Path) -> dict[str, list[tuple[str, str, object]]]:
    """Archives that try to write `outside` (or another place) when unpacked."""
    o = str(outside)
    ok = ("pkg/setup.py", "file", b"")
    return {
        "dotdot": [ok, ("../" + outside.name, "file", b"x")],
        "dotdot-inner": [ok, ("pkg/../../" + outside.name, "file", b"x")],
        "absolute": [ok, (o, "file", b"x")],
        "symlink-out": [ok, ("pkg/l", "sym", str(outside.parent)), ("pkg/l/" + outside.name, "file", b"x")],
        "symlink-up": [ok, ("pkg/l", "sym", "../../.."), ("pkg/l/" + outside.name, "file", b"x")],
        "hardlink-out": [ok, ("pkg/h", "hard", o)],
        "hardlink-relative-out": [ok, ("pkg/h", "hard", "../" + outside.name)],
        "device": [ok, ("pkg/null", "dev", None)],
        "fifo": [ok, ("pkg/f", "fifo", None)],
        "top-is-link": [("pkg", "sym", str(outside.parent))],
        "top-is-file": [("pkg", "file", b"x")],
        "two-tops": [ok, ("other/setup.py", "file", b"")],
        "dot-top": [("./setup.py", "file", b"")],
        "empty": [],
        "backslash-dotdot": [ok, ("pkg\\..\\..\\" + outside.name, "file", b"x")],
    }


@pytest.mark.parametrize("case", sorted(hostile(Path("/x/y")).keys()))
def test_a_hostile_sdist_is_refused_before_anything_is_written(tmp_path: Path, case: str) -> None:
    outside = tmp_path / "outside-marker"
    work = tmp_path / "a" / "b" / "work"
    work.mkdir(parents=True)
    archive = _tar(tmp_path / "x.tar.gz", hostile(outside)[case])
    with pytest.raises(UsageError):
        _unpack(archive, work / "src")
    assert not outside.exists()
    assert not list(tmp_path.rglob(outside.name))  # not written anywhere, under any folder
    assert sorted(p.name for p in work.iterdir()) == []  # no staging folder, no half tree


def test_a_decompression_bomb_is_refused_at_its_header(tmp_path: Path) -> None:
    """A header claiming more than the bound: refused before its data is inflated or written."""
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb") as gz:
        small = tarfile.TarInfo("pkg/setup.py")
        gz.write(small.tobuf())
        big = tarfile.TarInfo("pkg/big")
        big.size = MAX_UNPACKED + 1
        gz.write(big.tobuf())
        gz.write(b"\0" * 4096)  # the rest of the "data" never arrives: the header alone must be enough
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UsageError, match="decompression bomb"):
        _unpack(bomb, work / "src")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("data", [b"\x1f\x8b\x08\x00garbage", b"not a tar at all", b""])
def test_a_corrupt_archive_is_one_usage_error(tmp_path: Path, data: bytes) -> None:
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(data)
    (tmp_path / "work").mkdir()
    with pytest.raises(UsageError):
        _unpack(archive, tmp_path / "work" / "src")
    assert list((tmp_path / "work").iterdir()) == []


def test_a_sound_sdist_still_unpacks_with_dot_prefix_and_inner_links(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "x.tar.gz", [("./", "dir", None), ("./pkg/setup.py", "file", b"print()"),
                                          ("./pkg/sub/a.h", "file", b"//"), ("./pkg/sub/l", "sym", "a.h")])
    (tmp_path / "work").mkdir()
    _unpack(archive, tmp_path / "work" / "src")
    assert (tmp_path / "work" / "src" / "setup.py").read_text() == "print()"
    assert (tmp_path / "work" / "src" / "sub" / "l").read_text() == "//"
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["src"]
