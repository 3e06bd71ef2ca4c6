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

from olmo_doctor.fix.pyenv import Dist

# Written by the installer, not part of the wheel; restored byte for byte after a reinstall.
INSTALL_FILES = ("INSTALLER", "REQUESTED", "direct_url.json")


@dataclass(frozen=True)
class Packed:
    """A repacked wheel and what the installer had written next to it."""

    path: Path
    extras: dict[str, str]  # INSTALL_FILES and RECORD as installed -> their bytes, base64


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _console_scripts(dist_info: Path) -> set[str]:
    """Names pip generates as launchers from entry_points.txt (it recreates them on install)."""
    ep = dist_info / "entry_points.txt"
    if not ep.exists():
        return set()
    names, section = set(), ""
    for line in ep.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            names.add(line.split("=", 1)[0].strip())
    return names


def _wheel_tags(dist_info: Path) -> str | None:
    wheel = dist_info / "WHEEL"
    if not wheel.exists():
        return None
    tags = [ln.split(":", 1)[1].strip() for ln in wheel.read_text().splitlines() if ln.startswith("Tag:")]
    if not tags:
        return None
    parts = [t.split("-") for t in tags if t.count("-") == 2]
    if not parts:
        return None
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def wheel_name(name: str, version: str, tags: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', name)}-{version.replace('-', '_')}-{tags}.whl"


def repack(dist: Dist, prefix: str, out_dir: Path) -> Packed | None:
    """Zip an installed distribution back into a wheel under out_dir; None when it cannot be (no RECORD/WHEEL,
    or files outside the environment): undo then falls back to `pip install name==version`."""
    if dist.dist_info is None:
        return None
    info = Path(dist.dist_info)
    site, root = Path(dist.site), Path(prefix)
    tags = _wheel_tags(info)
    if tags is None or not (info / "RECORD").exists():
        return None
    scripts = _console_scripts(info)
    data_dir = f"{re.sub(r'[-_.]+', '_', dist.name)}-{dist.version.replace('-', '_')}.data"
    members: list[tuple[str, Path]] = []
    with open(info / "RECORD", newline="", errors="replace") as f:
        for row in csv.reader(f):
            if not row or not row[0]:
                continue
            path = Path(os.path.normpath(site / row[0]))
            if path.parent == info and path.name in (*INSTALL_FILES, "RECORD"):
                continue
            if "__pycache__" in path.parts or not path.is_file():
                continue  # bytecode is recompiled on install; a file the user deleted stays deleted
            if path.is_relative_to(site):
                arcname = path.relative_to(site).as_posix()
            elif path.is_relative_to(root):
                if path.parent.name == "bin" and path.name in scripts:
                    continue  # a launcher pip regenerates from entry_points.txt
                arcname = f"{data_dir}/data/{path.relative_to(root).as_posix()}"  # lands back at the same path
            else:
                return None
            members.append((arcname, path))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel_name(dist.name, dist.version, tags)
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for arcname, path in members:
            data = path.read_bytes()
            zinfo = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            zinfo.external_attr = (path.stat().st_mode & 0o777 | 0o100000) << 16  # keeps the executable bit
            zinfo.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zinfo, data)
            writer.writerow([arcname, _record_hash(data), len(data)])
        rec_name = f"{info.name}/RECORD"
        writer.writerow([rec_name, "", ""])
        zf.writestr(zipfile.ZipInfo(rec_name, date_time=(1980, 1, 1, 0, 0, 0)), record.getvalue())
    tmp.replace(target)
    extras = {n: base64.b64encode((info / n).read_bytes()).decode() for n in (*INSTALL_FILES, "RECORD")
              if (info / n).exists()}
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
