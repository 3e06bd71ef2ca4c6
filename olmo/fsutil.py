"""File-system helpers of the trainer: bounded reads of metadata files, crash-safe writes (through
olmo_common/atomic.py, the one atomic-write helper of both packages), folder removal that no reader sees half done,
and the "where is the disk full / can this folder be written" answers the error messages give."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from olmo_common.atomic import atomic_write, fsync_dir, shared_mode
from olmo_common.bounded.files import read_bytes, read_text
from olmo_common.local_paths import URL_RE  # s3://, gs://, https://, hf://, file://: any scheme of 2+ letters


def read_small(path: Path, kind: str = "model config") -> bytes:
    """The bytes of a metadata file of `kind` (a key of olmo_common.bounded.files.CAPS). OSError (which the
    callers already turn into one line) when it is not a regular file, e.g. a FIFO that would block or /dev/zero
    that never ends, or is larger than its kind can be (refused from its size, before it is read)."""
    return read_bytes(path, kind)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`data` at `path`, crash-safe (olmo_common/atomic.py: the one atomic-write helper of both packages), readable
    by the group as a plain new file would be."""
    atomic_write(path, data, shared_mode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1) + "\n").encode())


def remove_tree(path: Path) -> None:
    """Delete a checkpoint folder of the caller's own so that no reader ever sees it half-deleted: rename it aside
    (onto a fresh empty folder `NAME-deleting-XXXXXXXX`, so nothing planted at a fixed name is touched), then
    remove it. A symlink there (a checkpoint someone moved and linked) loses only the link: what it points at is
    not ours to delete."""
    if not os.path.lexists(path):
        return
    if path.is_symlink():
        path.unlink()
        return
    trash = Path(tempfile.mkdtemp(dir=path.parent, prefix=f"{path.name}-deleting-"))
    os.rename(path, trash)
    fsync_dir(path.parent)
    shutil.rmtree(trash)


def mount_of(path: Path) -> str:
    """The device and mount point holding `path` ("/dev/nvme0n1p2 at /data"), for messages about a full disk."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    try:
        lines = read_text("/proc/self/mounts", "system file", errors="replace").splitlines()
        sources = {line.split()[1]: line.split()[0] for line in lines if len(line.split()) > 2}
    except OSError:
        sources = {}
    source = sources.get(str(p))
    return f"{source} at {p}" if source and source != str(p) else str(p)


def gigabytes(n: float) -> str:
    """'1.3 GB', or two significant digits below 0.1 GB, so a small need does not read as '0.0 GB'."""
    gb = n / 1e9
    return f"{gb:.1f} GB" if gb >= 0.1 else f"{gb:.2g} GB"


def free_bytes(path: Path) -> int | None:
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None




def check_local(path: Path | str, what: str) -> None:
    """ConfigError when `path` is a URL (`s3://bucket/run`): olmo reads and writes local paths (or mounted ones)
    only, and a URL would otherwise become a local folder named `s3:`."""
    from olmo.errors import ConfigError, one_line

    text = str(path)
    if URL_RE.match(text):
        scheme = text.split(":", 1)[0]
        text = re.sub(r"^([^:]+):/(?!/)", r"\1://", text)  # as the user typed it, before pathlib's "s3:/b"
        raise ConfigError(f"{what} {one_line(text)[:200]} is a URL; olmo reads and writes local paths only "
                          f"({scheme}:// is not supported): copy or mount it locally (e.g. with s3fs, gcsfuse or "
                          "`hf download --local-dir`) and give that path")


def check_output_dir(path: Path, what: str) -> None:
    """ConfigError unless `path` is a folder this process can write, or one it can create: said before any
    work starts, so a read-only mount or a file in the way fails in a second with nothing written."""
    from olmo.errors import ConfigError

    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what} {p} is a file, not a folder; choose another {what}")
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} {p} cannot be created: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {p} cannot be written ({probe} is read-only or not yours); choose another {what}")


def missing_dirs(path: Path) -> list[Path]:
    """`path` and its ancestors that do not exist yet, deepest first: what `mkdir(parents=True)` will create,
    so that a run that fails can remove exactly those again (`remove_empty_dirs`)."""
    out: list[Path] = []
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def remove_empty_dirs(dirs: list[Path]) -> None:
    """rmdir each of `dirs` (deepest first) that is empty; a folder with anything in it stays."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return


def inside_folder(path: Path, directory: Path) -> bool:
    """Whether `path` is a file of `directory` itself: not a symlink leading out of it (to ~/.ssh/id_rsa, which a
    command would then copy into its output). The one link allowed out is the Hugging Face hub cache's own:
    `models--X/snapshots/<rev>/model.safetensors -> ../../blobs/<sha256>`."""
    real, home = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    if real.is_relative_to(home):
        return True
    return home.parent.name == "snapshots" and real.parent == home.parent.parent / "blobs"
