"""Advisory locks on the folders `olmo` writes into: a run_dir (`olmo train`) and a prepare-data output.

Two processes writing one folder publish each other's bytes (a shard under the other run's metadata, metrics
steps twice), so the writer holds `fcntl.flock` on `FOLDER/.olmo.lock` for its whole run and a second one is
refused in one line naming the holder's pid and start time. The kernel drops a flock when its process dies,
however it dies, so a lock file left by a killed run is simply taken over. On release the file is removed
while still locked; a process that locked a file just removed sees that its inode is no longer the path's and
tries again, so two processes never both believe they hold the folder.

Under torchrun only global rank 0 locks its run_dir: a multi-node run_dir must be one shared folder
(preflight.py checks that), so one lock covers the whole job and the ranks of one job never lock each other out.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from olmo.errors import ConfigError, OlmoError, one_line
from olmo.fsutil import missing_dirs, remove_empty_dirs

LOCK_NAME = ".olmo.lock"
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})  # filesystems without flock
# A lock file planted as a symlink (to ~/.bashrc) would be truncated and rewritten through; a fifo would block
# the open. Neither is followed or waited on.
_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK
_mine: set[str] = set()  # lock files this process holds (check_free must not refuse its own run)


def _holder(fd: int) -> str:
    """'pid N (started T)' from a lock file's contents; the contents are data from another process, so only
    a number and a short timestamp are taken from them."""
    try:
        raw = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError, RecursionError):
        raw = {}
    pid = raw.get("pid") if isinstance(raw, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool):
        return "another process"
    started = one_line(str(raw.get("started", "")))[:40]
    host = one_line(str(raw.get("host", "")))[:64]
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return f"pid {pid}{where}" + (f" (started {started})" if started else "")


class DirLock:
    """`with DirLock(folder, "run_dir"):` holds the folder for this process; OlmoError if another holds it."""

    def __init__(self, directory: Path, what: str):
        self.directory, self.what = Path(directory), what
        self.path = self.directory / LOCK_NAME
        self.fd: int | None = None

    def _not_a_plain_file(self) -> None:
        """OlmoError when the lock file is a symlink or not a regular file: taking it would write wherever the
        link points (outside the folder), and a FIFO would block."""
        try:
            mode = os.lstat(self.path).st_mode
        except OSError:
            return
        if not stat.S_ISREG(mode):
            raise OlmoError(f"{self.path} is not a plain file (a symlink, folder or device); olmo writes its lock "
                            f"there, so remove it or use another {self.what}")

    def check_free(self) -> None:
        """OlmoError if another process holds the folder now; writes nothing (a shared lock, at once undone),
        so a command can say "in use" before its slower checks without leaving a file behind."""
        if os.path.realpath(self.path) in _mine:
            return
        self._not_a_plain_file()
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | _SAFE)
        except OSError:
            return  # no lock file (or none readable, or a link): nobody holds it, or acquire() will tell
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return  # acquire() refuses it
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OlmoError(f"{self.what} {self.directory} is in use by {_holder(fd)}; wait for it to finish or "
                            f"use another {self.what}") from None
        except OSError:
            pass
        finally:
            os.close(fd)

    def acquire(self) -> DirLock:
        self._not_a_plain_file()
        for _ in range(20):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | _SAFE, 0o644)
            except OSError as e:
                if e.errno == errno.ELOOP:  # never follow it: the lock is truncated and rewritten below
                    raise OlmoError(f"{self.path} is a symlink; olmo keeps a plain lock file there, so it refuses "
                                    "to follow it (remove the link)") from None
                raise OlmoError(f"cannot write in {self.what} {self.directory}: {e.strerror}; choose a folder you "
                                "can write to") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OlmoError(f"{self.path} is not a regular file (a fifo or device?); olmo keeps a plain lock "
                                "file there, so move it away")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise OlmoError(f"{self.what} {self.directory} is in use by {holder}; wait for it to finish or use "
                                f"another {self.what}") from None
            except OSError as e:
                os.close(fd)
                if e.errno in NO_LOCKS:  # advisory only: a filesystem that cannot lock still trains
                    return self
                raise
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = -1
            if current == os.fstat(fd).st_ino:
                self.fd = fd
                _mine.add(os.path.realpath(self.path))
                break
            os.close(fd)  # locked a file its holder removed on release: lock the new one
        else:
            raise OlmoError(f"{self.what} {self.directory}: could not take {LOCK_NAME} (it keeps changing); is "
                            "another olmo starting there?")
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv[:2])[:200],
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        _mine.discard(os.path.realpath(self.path))
        try:
            if os.lstat(self.path).st_ino == os.fstat(self.fd).st_ino:  # ours still: not a file put there since
                self.path.unlink()  # still locked: a newcomer that opened it will retry
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


@contextlib.contextmanager
def locked_new_dir(directory: Path, what: str) -> Iterator[DirLock]:
    """`directory` created (with its missing parents) and locked for the `with` block. On the way out the lock is
    released and the folders made here are removed again when still empty, so a command that failed before it
    wrote anything leaves no folder behind (and never removes one it did not make)."""
    created = missing_dirs(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {what} {directory}: {e.strerror}") from None
    lock = DirLock(directory, what)
    try:
        lock.acquire()
    except BaseException:
        remove_empty_dirs(created)
        raise
    try:
        yield lock
    finally:
        lock.release()
        remove_empty_dirs(created)


# ------------------------------------------------------------------------------------------- folder holds
# A second kind of lock, on the folder itself (flock on its directory descriptor): `olmo train` holds each data
# folder it reads shared for the whole run, and a command about to replace or rewrite a folder (prepare-data,
# export-hf, import-hf) takes it exclusive first. A folder a live run reads is then never replaced under it, and
# a run never starts on a folder being rewritten. Nothing is written into the folder, so read-only data works.
def _hold(folder: Path, mode: int) -> int | None:
    """A descriptor of `folder` holding flock `mode`, or None where the filesystem has no flock (advisory)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # not a folder we can open: whatever uses it next says why
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError as e:
        os.close(fd)
        if e.errno in NO_LOCKS:
            return None
        raise
    return fd


def hold_for_reading(folder: Path, what: str) -> int | None:
    """Hold `folder` shared while the returned descriptor stays open (close it with `let_go`); OlmoError when a
    command is replacing or rewriting it right now."""
    try:
        return _hold(folder, fcntl.LOCK_SH)
    except BlockingIOError:
        raise OlmoError(f"{what} {folder} is being written or replaced by another olmo command (prepare-data, "
                        "export-hf or import-hf); wait for it to finish") from None


def hold_for_replacing(folder: Path, what: str) -> int | None:
    """Hold `folder` exclusively (close with `let_go`); OlmoError when anything holds it, e.g. an `olmo train`
    reading it as data: olmo never replaces a folder a live run reads."""
    try:
        return _hold(folder, fcntl.LOCK_EX)
    except BlockingIOError:
        raise OlmoError(f"{what} {folder} is in use by a running olmo (e.g. `olmo train` reading it as data); "
                        "olmo does not replace a folder a live run reads: wait for the run to finish or choose "
                        f"another {what}") from None


def let_go(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
