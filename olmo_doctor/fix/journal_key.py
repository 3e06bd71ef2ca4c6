"""The user's journal key: an HMAC over every journal manifest, so only this user's olmo-doctor can write one.

A manifest's plain sha256 proves nothing: whoever edits the entry can recompute it, and a repository can ship a
`.olmo-doctor/journal/` of its own. The key is 32 random bytes in $XDG_STATE_HOME/olmo-doctor/journal.key
(default ~/.local/state), created on first use with mode 0600 in a folder of mode 0700; a journal signed under
another key (another user, another machine, a cloned repo) is refused by `fix --undo`. The folder is refused
(one line) when it is a symlink, someone else's, or writable by others: whoever can write it can replace the
key. The key file is opened inside the opened folder, never through a symlink.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from olmo_common.bounded.files import file_kind
from olmo_doctor.errors import UsageError

KEY_BYTES = 32


def key_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "olmo-doctor" / "journal.key"


def _folder(folder: Path) -> int:
    """The key's folder, created private on first use and opened without following a symlink; refused unless it
    is a folder of this user's that nobody else can write (whoever can write it can swap the key, and with it
    forge every journal and wheel-cache record)."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        what = "a symlink" if folder.is_symlink() else f"not usable ({e.strerror or e})"
        raise UsageError(f"the journal key folder {folder} is {what}; olmo-doctor keeps the key that signs its "
                         "journals there: make it a real folder of yours (mkdir -m 700) or set XDG_STATE_HOME"
                         ) from None
    st = os.fstat(fd)
    problem = None
    if st.st_uid != os.getuid():
        problem = f"owned by another user (uid {st.st_uid})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    if problem:
        os.close(fd)
        raise UsageError(f"the journal key folder {folder} is {problem}; olmo-doctor will not keep the key that "
                         f"signs its journals where someone else can replace it: chmod 700 {folder}, or set "
                         "XDG_STATE_HOME to a folder of yours")
    return fd


def _create(name: str, folder: int) -> None:
    """A new random key under that name in the pinned folder, unless one is there already (never replaced)."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(KEY_BYTES))
        f.flush()
        os.fsync(f.fileno())


def _key() -> bytes:
    path = key_path()
    folder = _folder(path.parent)
    try:
        _create(path.name, folder)
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read(KEY_BYTES + 1) if stat.S_ISREG(st.st_mode) else b""
    except OSError as e:
        raise UsageError(f"cannot use the journal key {path} ({e.strerror or e}); fix --apply signs its journal "
                         "with it: make that folder writable or set XDG_STATE_HOME") from None
    finally:
        os.close(folder)
    _check_private(path, st, key)
    return key


def _check_private(path: Path, st: os.stat_result, key: bytes) -> None:
    """Refuse a key that is not a regular file, is not the user's own, others can read, or has the wrong size."""
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"the journal key {path} is {file_kind(st.st_mode)}, not a file; remove it (journals it "
                         "signed can then no longer be undone)")
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or len(key) != KEY_BYTES:
        raise UsageError(f"the journal key {path} is not a private {KEY_BYTES}-byte file of yours; remove it "
                         "(journals it signed can then no longer be undone)")


def exists() -> bool:
    """Whether this user has a journal key yet (nothing can have been signed without one)."""
    return os.path.lexists(key_path())


def sign(body: bytes) -> str:
    return hmac.new(_key(), body, hashlib.sha256).hexdigest()


def valid(body: bytes, mac: object) -> bool:
    return isinstance(mac, str) and hmac.compare_digest(sign(body), mac)
