"""Back up an installed distribution as a wheel, so undo can put it back exactly and offline.

`pip install name==old` after a fix is not an undo: the old build may have come from another index (torch
+cu128), from a local build (flash-attn), or the machine may be offline. Before a fix replaces or removes a
distribution we zip its installed files, listed by its RECORD, back into a wheel in the journal. The files pip
writes at install time (INSTALLER, REQUESTED, direct_url.json, RECORD) are kept aside and written back after the
reinstall, so the dist-info is byte-identical and `pip freeze` prints the same line, editable installs included.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from olmo_common.atomic import AtomicFile, shared_mode
from olmo_common.bounded.files import open_regular, read_bytes, read_text
from olmo_doctor.fix.pyenv import Dist

# Written by the installer, not part of the wheel; restored byte for byte after a reinstall.
INSTALL_FILES = ("INSTALLER", "REQUESTED", "direct_url.json")


@dataclass(frozen=True)
class Packed:
    """A repacked wheel and what the installer had written next to it."""

    path: Path
    extras: dict[str, str]  # INSTALL_FILES and RECORD as installed -> their bytes, base64


def _console_scripts(dist_info: Path) -> set[str]:
    """Names pip generates as launchers from entry_points.txt (it recreates them on install)."""
    ep = dist_info / "entry_points.txt"
    if not ep.exists():
        return set()
    names, section = set(), ""
    for line in read_text(ep, "package metadata", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            names.add(line.split("=", 1)[0].strip())
    return names


def _wheel_tags(dist_info: Path) -> str | None:
    """The WHEEL file's tags as one compressed tag set (py3-none-any, cp312.cp313-abi3-...)."""
    wheel = dist_info / "WHEEL"
    if not wheel.exists():
        return None
    text = read_text(wheel, "package metadata", errors="replace")
    tags = [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Tag:")]
    parts = [t.split("-") for t in tags if t.count("-") == 2]
    if not parts:
        return None
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def _add(zf: zipfile.ZipFile, arcname: str, path: Path) -> tuple[str, int]:
    """Copy one installed file into the wheel, streamed (torch's libraries are gigabytes); its RECORD hash and
    size."""
    zinfo = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
    zinfo.compress_type = zipfile.ZIP_DEFLATED
    h, size = hashlib.sha256(), 0
    with open_regular(path) as src:
        st = os.fstat(src.fileno())
        zinfo.external_attr = (st.st_mode & 0o777 | 0o100000) << 16  # keeps the executable bit
        zinfo.file_size = st.st_size  # lets zipfile pick zip64 for a file past 2 GiB
        with zf.open(zinfo, "w") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
                size += len(block)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode(), size


def wheel_name(name: str, version: str, tags: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', name)}-{version.replace('-', '_')}-{tags}.whl"


@dataclass(frozen=True)
class _Layout:
    """Where a distribution's installed files lie: its dist-info, site-packages, the environment's prefix."""

    info: Path
    site: Path
    root: Path
    scripts: set[str]  # launchers pip regenerates from entry_points.txt
    data_dir: str  # the wheel's <name>-<version>.data folder


def _arcname(layout: _Layout, path: Path) -> str | None:
    """The file's name in the wheel; "" for a file the wheel leaves out, None for one outside the environment
    (then the distribution cannot be repacked)."""
    if path.parent == layout.info and path.name in (*INSTALL_FILES, "RECORD"):
        return ""
    if "__pycache__" in path.parts or not path.is_file():
        return ""  # bytecode is recompiled on install; a file the user deleted stays deleted
    if path.is_relative_to(layout.site):
        return path.relative_to(layout.site).as_posix()
    if not path.is_relative_to(layout.root):
        return None
    if path.parent.name == "bin" and path.name in layout.scripts:
        return ""  # a launcher pip regenerates from entry_points.txt
    return f"{layout.data_dir}/data/{path.relative_to(layout.root).as_posix()}"  # lands back at the same path


def _members(layout: _Layout) -> list[tuple[str, Path]] | None:
    """(name in the wheel, installed file) for each file the RECORD lists; None when one lies outside."""
    members: list[tuple[str, Path]] = []
    # RECORD rows never span lines (pip writes one file per line)
    for row in csv.reader(read_text(layout.info / "RECORD", "package metadata", errors="replace").splitlines()):
        if not row or not row[0]:
            continue
        path = Path(os.path.normpath(layout.site / row[0]))
        arcname = _arcname(layout, path)
        if arcname is None:
            return None
        if arcname:
            members.append((arcname, path))
    return members


def _write_wheel(target: Path, info: Path, members: list[tuple[str, Path]]) -> None:
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    # under a fresh temp name, renamed into place (olmo_common/atomic.py): a fixed one could be a planted link
    with AtomicFile(target, shared_mode()) as tmp, os.fdopen(os.dup(tmp.fileno()), "wb") as raw, \
            zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for arcname, path in members:
            writer.writerow([arcname, *_add(zf, arcname, path)])
        rec_name = f"{info.name}/RECORD"
        writer.writerow([rec_name, "", ""])
        zf.writestr(zipfile.ZipInfo(rec_name, date_time=(1980, 1, 1, 0, 0, 0)), record.getvalue())


def repack(dist: Dist, prefix: str, out_dir: Path) -> Packed | None:
    """Zip an installed distribution back into a wheel under out_dir; None when it cannot be (no RECORD/WHEEL,
    or files outside the environment): undo then falls back to `pip install name==version`."""
    if dist.dist_info is None:
        return None
    info = Path(dist.dist_info)
    tags = _wheel_tags(info)
    if tags is None or not (info / "RECORD").exists():
        return None
    data_dir = f"{re.sub(r'[-_.]+', '_', dist.name)}-{dist.version.replace('-', '_')}.data"
    members = _members(_Layout(info, Path(dist.site), Path(prefix), _console_scripts(info), data_dir))
    if members is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel_name(dist.name, dist.version, tags)
    _write_wheel(target, info, members)
    extras = {n: base64.b64encode(read_bytes(info / n, "package metadata")).decode()
              for n in (*INSTALL_FILES, "RECORD") if (info / n).exists()}
    return Packed(target, extras)


def restore_install_files(dist: Dist, extras: dict[str, str]) -> None:
    """After reinstalling from a repacked wheel, put back the installer's files and the RECORD exactly as they
    were: the reinstalled files are the same bytes, so the old RECORD describes them (pip's bytecode included)."""
    if dist.dist_info is None:
        return
    info = Path(dist.dist_info)
    for name in (*INSTALL_FILES, "RECORD"):
        path = info / name
        if name in extras:
            path.write_bytes(base64.b64decode(extras[name]))
        elif path.exists() and name != "RECORD":
            path.unlink()
