"""The user's journal key: an HMAC over every journal manifest, so only this user's olmo-doctor can write one.

A manifest's plain sha256 proves nothing: whoever edits the entry can recompute it, and a repository can ship a
`.olmo-doctor/journal/` of its own. The key is 32 random bytes in $XDG_STATE_HOME/olmo-doctor/journal.key
(default ~/.local/state), created on first use with mode 0600; a journal signed under another key (another user,
another machine, a cloned repo) is refused by `fix --undo`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from olmo_doctor.errors import UsageError

KEY_BYTES = 32


def key_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "olmo-doctor" / "journal.key"


def _key() -> bytes:
    path = key_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read(KEY_BYTES + 1)
    except OSError as e:
        raise UsageError(f"cannot use the journal key {path} ({e.strerror or e}); fix --apply signs its journal "
                         "with it: make that folder writable or set XDG_STATE_HOME") from None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or len(key) != KEY_BYTES:
        raise UsageError(f"the journal key {path} is not a private {KEY_BYTES}-byte file of yours; remove it "
                         "(journals it signed can then no longer be undone)")
    return key


def sign(body: bytes) -> str:
    return hmac.new(_key(), body, hashlib.sha256).hexdigest()


def valid(body: bytes, mac: object) -> bool:
    return isinstance(mac, str) and hmac.compare_digest(sign(body), mac)
