"""Crash-safe file writes: the one helper `olmo` and `olmo-doctor` both use (stdlib only: the trainer's worker
processes import it too).

A file is written under a fresh temp name beside its target (`.NAME.XXXXXXXX.tmp`, made with O_EXCL, so a
symlink or file planted at any name is never opened, written through or removed), fsynced, renamed over the
target, and the folder is fsynced. A reader sees the old file or the new one, never a half-written one (rename is
atomic within a filesystem; the folder fsync makes the rename itself survive a power cut). On any failure the temp
file, which this process created, is removed, and the target keeps its old bytes.

    atomic_write(path, data)                 # bytes
    with AtomicFile(path) as f: f.write(...) # streamed; renamed into place when the block ends without error
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import TracebackType

PRIVATE = 0o600


def shared_mode() -> int:
    """0644 less the umask: what a plain `open(path, "w")` of a new file gives (a model folder or token shards are
    meant to be read by the group)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o644 & ~mask


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicFile:
    """A new file for `path`, written under a temp name beside it: `commit()` puts it at `path`, `abort()` (or an
    exception inside `with`) removes the temp file. `mode`: the file's permission bits (default 0600). Writes go
    through os.write, whole, so a full disk raises OSError(ENOSPC) at the write that hit it."""

    def __init__(self, path: Path, mode: int | None = None):
        self.path = Path(path)
        self.mode = PRIVATE if mode is None else mode
        self.fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        self.tmp = Path(tmp)
        self.closed = False

    def fileno(self) -> int:
        return self.fd

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data).cast("B")
        try:
            while view:  # os.write may write less than asked
                view = view[os.write(self.fd, view):]
        except OSError as e:
            if e.filename is None:  # a failed write names no file: say which one
                raise OSError(e.errno, e.strerror or str(e), str(self.path)) from e
            raise
        return len(data)

    def commit(self) -> None:
        try:
            os.fsync(self.fd)
            os.fchmod(self.fd, self.mode)
            self._close()
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise
        fsync_dir(self.path.parent)

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def abort(self) -> None:
        self._close()
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Put `data` at `path` atomically (see the module docstring); `mode` defaults to 0600."""
    with AtomicFile(path, mode) as f:
        f.write(data)
