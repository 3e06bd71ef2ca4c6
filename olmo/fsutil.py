"""Crash-safe file writes: write a temp file next to the target, fsync it, rename it over the target, fsync the
directory. A reader then sees the old file or the new one, never a half-written one (POSIX rename is atomic
within a filesystem; the directory fsync makes the rename itself survive a power cut)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

SMALL_FILE_BYTES = 256 * 2**20  # a manifest, sidecar, train state or config.json; far more is not one


def read_small(path: Path, limit: int = SMALL_FILE_BYTES) -> bytes:
    """The bytes of a metadata file. OSError (which the callers already turn into one line) when it is not a
    regular file, e.g. a FIFO that would block or /dev/zero that never ends, or is larger than `limit`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit // 2**20} MB, too large for a metadata file", str(path))
    return data


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_fresh(path: Path) -> IO[bytes]:
    """`path` opened for writing as a new file of ours. A leftover temp file is removed first, and O_EXCL |
    O_NOFOLLOW mean a symlink planted at the name is never written through (it would write outside the folder)."""
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "wb")


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Call `write(f)` on a temp file in path's directory, then atomically put it at `path`."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with create_fresh(tmp) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    def write(f: IO[bytes]) -> None:
        f.write(data)

    atomic_write(path, write)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1) + "\n").encode())


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def remove_tree(path: Path) -> None:
    """Delete a directory so that no reader ever sees it half-deleted: rename it aside first, then remove."""
    if not path.exists() and not path.is_symlink():
        return
    trash = path.with_name(f"{path.name}-deleting")
    _unlink_or_rmtree(trash)
    os.rename(path, trash)
    fsync_dir(path.parent)
    _unlink_or_rmtree(trash)


def _unlink_or_rmtree(path: Path) -> None:
    """A symlink (a checkpoint folder someone linked elsewhere) loses only the link: what it points at is not
    ours to delete, and rmtree refuses links anyway."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def mount_of(path: Path) -> str:
    """The device and mount point holding `path` ("/dev/nvme0n1p2 at /data"), for messages about a full disk."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    try:
        with open("/proc/self/mounts") as f:
            sources = {line.split()[1]: line.split()[0] for line in f if len(line.split()) > 2}
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
