"""The fix journal: one folder per `fix --apply` run, holding what ran and everything needed to undo it.

    <project>/.olmo-doctor/journal/<id>/
        manifest.json   {"format": 1, "sha256": <sha256 of the canonical entry JSON>, "entry": {...}}
        files/<n>       each file the run changed, byte for byte as it was before (none when the run created it)
        wheels/*.whl    installed distributions the run replaced or removed, repacked (wheelpack.py)
        logs/<n>.log    the full output of each command that ran

The entry records the plan, every command with its exit code, `pip freeze --all` before and after, and the
sha256 of every backup, wheel and log; the manifest carries the sha256 of the entry itself and an HMAC of it
under a key only this user holds (journal_key.py), so anything edited or truncated afterwards, and any journal
that came with a cloned repository, is refused with one line. The manifest is rewritten atomically after every
step, so an interrupted run leaves an entry that `fix --undo` can still roll back.

A journal is data, never instructions, even when signed (safety.py checks every entry before use): the files it
names are confined to the project, its backups and wheels are read from its own folder only, and the Python it
names is compared with the running one, never executed.

The journal lives in the project, next to the env file it backs up. A project dir we cannot write is refused
rather than journaled elsewhere, so `fix --undo` always finds the journal where the changes are. Its folders are
held open by file descriptor from the first check to the last write (pins.py): `.olmo-doctor` swapped for a
symlink mid-run cannot redirect a write, and a hard-linked file is never copied in. An entry is bound to its
project: its signed body names the project folder, and another project's entry is refused.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from olmo_common.atomic import atomic_write
from olmo_common.bounded.data import parse_json
from olmo_common.bounded.files import read_bytes, sha256_file
from olmo_doctor.errors import UsageError
from olmo_doctor.fix import journal_key, safety
from olmo_doctor.fix.pins import Pins, read_regular
from olmo_doctor.fix.safety import JournalError

FORMAT = 1
STATE, JOURNAL = ".olmo-doctor", "journal"
JOURNAL_DIR = ".olmo-doctor/journal"
_ID = re.compile(r"^(\d{4,})-\d{8}-\d{6}$")


__all__ = ["Entry", "Journal", "JournalError", "check_writable", "sha256_bytes"]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(entry: dict[str, Any]) -> bytes:
    # surrogatepass: a path that is not UTF-8 (a project folder named with a \xff byte) reaches Python as a lone
    # surrogate; it is signed as such, the same bytes every time (the manifest itself is written ASCII-escaped)
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def check_writable(project: Path) -> None:
    """Refuse (UsageError) before changing anything when the project's .olmo-doctor/ cannot be written.

    Probes by creating and removing a temp file: permission bits alone miss read-only mounts and root."""
    if not project.is_dir():
        raise UsageError(f"project dir {project} does not exist; pass --project DIR")
    safety.state_dir(project)
    for sub in (project / ".olmo-doctor", project / JOURNAL_DIR):
        if sub.exists() and not sub.is_dir():
            raise UsageError(f"{sub} is a file, but olmo-doctor keeps a folder there; move it away")
    probe = next(d for d in (project / JOURNAL_DIR, project / ".olmo-doctor", project) if d.is_dir())
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".olmo-doctor-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UsageError(f"{probe} is not writable ({e.strerror or e}); fix --apply keeps its env file and journal "
                         "in the project's .olmo-doctor/: run it from a writable project dir or pass --project DIR"
                         ) from None


class Entry:
    """One journal entry: a folder and its manifest, saved atomically after every change. `folder` is the pinned
    path every read and write goes through; `shown` the one to tell the user."""

    def __init__(self, folder: Path, data: dict[str, Any], journal: Journal | None = None):
        self.folder = folder
        self.data = data
        self.journal = journal  # keeps the pinned folders open while the entry is in use
        self.shown = journal.pins.show(folder) if journal is not None else folder

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def status(self) -> str:
        return str(self.data["status"])

    def save(self) -> None:
        body = _canonical(self.data)
        manifest = {"format": FORMAT, "sha256": sha256_bytes(body), "mac": journal_key.sign(body), "entry": self.data}
        atomic_write(self.folder / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n")

    def _store(self, sub: str, name: str, data: bytes) -> tuple[str, str]:
        folder = self.journal.pins.folder(self.folder, sub, create=True, mode=0o700) if self.journal else None
        folder = folder or self.folder / sub
        folder.mkdir(exist_ok=True)
        atomic_write(folder / name, data)  # mkstemp: 0600, the backup of an env file may hold secrets
        return f"{sub}/{name}", sha256_bytes(data)

    def back_up_file(self, path: Path, rel: str) -> dict[str, Any]:
        """Record a file's state before the run changes it (saved before the change, so a crash can undo it).
        `path` is the pinned path of the project file `rel`; a symlink, a FIFO or a hard link there is refused."""
        data = read_regular(path, "journal file", Path(rel))
        record: dict[str, Any] = {"path": rel, "existed": data is not None}
        if data is not None:
            record["backup"], record["sha256_before"] = self._store("files", str(len(self.data["files"])), data)
            record["mode"] = os.stat(path, follow_symlinks=False).st_mode & 0o777  # never a setuid bit back
        self.data["files"].append(record)
        self.save()
        return record

    def remove(self) -> None:
        """Delete this entry's folder (a run that left nothing to undo): its contents through the pinned path,
        then the folder by name inside the pinned journal folder."""
        if self.journal is None:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        _empty(self.folder)
        if self.journal.where is not None:
            try:
                os.rmdir(self.journal.where / self.id)
            except OSError:
                pass

    def add_log(self, text: str) -> tuple[str, str]:
        return self._store("logs", f"{len(self.data['steps'])}.log", text.encode())

    def verify(self) -> None:
        """Every backup, wheel and log is present with the recorded checksum (the manifest was checked on load)."""
        refs = [(f.get("backup"), f.get("sha256_before")) for f in self.data["files"]]
        refs += [(w["file"], w["sha256"]) for w in self.data["wheels"]]
        refs += [(s.get("log"), s.get("log_sha256")) for s in self.data["steps"]]
        for rel, digest in refs:
            if rel is None:
                continue
            path = safety.member(self.folder, rel, self.id, self.shown)
            if not path.is_file() or sha256_file(path) != digest:
                raise JournalError(f"journal entry {self.id}: {rel} is missing or changed since it was written; "
                                   f"refusing to use it (inspect or move away {self.shown})")

    def read_backup(self, rel: str, digest: str) -> bytes:
        """A backup's bytes from this entry's own folder, checked against its recorded sha256 as they are read."""
        data = read_bytes(safety.member(self.folder, rel, self.id, self.shown), "journal file")
        if sha256_bytes(data) != digest:
            raise JournalError(f"journal entry {self.id}: {rel} changed since it was written; refusing to restore "
                               f"it (inspect or move away {self.shown})")
        return data


def _matching(ids: list[str], wanted: str) -> str | None:
    """The one entry id that is `wanted`, has it as its sequence number, or is the only one it begins."""
    if wanted in ids:
        return wanted
    if wanted.isdigit():
        by_seq = [i for i in ids if int(i.split("-", 1)[0]) == int(wanted)]
        if by_seq:
            return by_seq[0]
    matches = [i for i in ids if i.startswith(wanted)]
    return matches[0] if len(matches) == 1 else None


def _check_signed(manifest: dict[str, Any], body: bytes, digest: object, mac: object, entry_id: str,
                  shown: Path) -> None:
    """Refuse a manifest edited after it was written (checksum) or not signed with this user's journal key."""
    if manifest.get("format") != FORMAT or sha256_bytes(body) != digest:
        raise JournalError(f"journal entry {entry_id}: manifest.json was edited after it was written "
                           f"(checksum mismatch); refusing to use it (inspect or move away {shown})")
    if not journal_key.valid(body, mac):
        raise JournalError(f"journal entry {entry_id} was not written by olmo-doctor for this user (its "
                           f"signature does not match; copied from elsewhere, or edited?); refusing to use it "
                           f"(inspect or move away {shown})")


class Journal:
    """The project's journal folder, pinned (pins.py) on first use and for as long as this object lives."""

    def __init__(self, project: Path):
        self.project = project
        self.root = project / JOURNAL_DIR  # as the user names it
        self.pins = Pins()
        self._root: Path | None = None
        self._tops: dict[str, Path] = {}  # top-level folders of the project, pinned
        self.where: Path | None = None  # the pinned journal folder, once it exists

    def _pinned(self, create: bool) -> Path | None:
        """The journal folder, pinned once: later calls reuse the descriptors opened at the first check."""
        if self.where is None:
            state = self._folder(STATE, create)
            self.where = self.pins.folder(state, JOURNAL, create=create, mode=0o700) if state else None
        return self.where

    def _folder(self, name: str, create: bool) -> Path | None:
        """A folder at the project's top, pinned once (`.olmo-doctor` is checked with lstat first for its
        messages, then opened with O_NOFOLLOW)."""
        if name not in self._tops:
            safety.state_dir(self.project)
            if self._root is None:
                self._root = self.pins.root(self.project)
            folder = self.pins.folder(self._root, name, create=create)
            if folder is None:
                return None
            self._tops[name] = folder
        return self._tops[name]

    def project_file(self, rel: object, entry_id: str, create: bool = False) -> Path:
        """The pinned path of the project file a record names (checked by safety.project_file first): every
        folder on the way opened with O_NOFOLLOW, so none can be swapped for a symlink before the write."""
        safety.project_file(self.project, rel, entry_id)
        assert isinstance(rel, str)
        *folders, name = rel.split("/")
        if not folders:
            if self._root is None:
                self._root = self.pins.root(self.project)
            return self._root / name
        top = self._folder(folders[0], create)
        parent = self.pins.walk(top, folders[1:], create=create) if top is not None else None
        return (parent or self.project / "/".join(folders)) / name

    def ids(self) -> list[str]:
        where = self._pinned(create=False)
        if where is None:
            return []
        names = [n for n in os.listdir(where) if _ID.match(n) and _is_folder(where / n)]
        return sorted(names, key=lambda i: int(i.split("-", 1)[0]))

    def load(self, entry_id: str, verify: bool = True) -> Entry:
        where = self._pinned(create=False)
        shown = self.root / entry_id
        # the name's shape, then the folder itself pinned (a symlink there is refused, not followed)
        folder = self.pins.folder(where, entry_id) if where is not None and _ID.match(entry_id) else None
        if folder is None:
            raise JournalError(f"journal entry {entry_id!r} is not a folder in {self.root} (symlinks are refused)")
        try:
            raw = read_regular(safety.member(folder, "manifest.json", entry_id, shown), "journal manifest",
                               shown / "manifest.json")
            manifest = parse_json(raw or b"", "journal manifest")
            entry, digest, mac = manifest["entry"], manifest["sha256"], manifest.get("mac")
            body = _canonical(entry)
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as e:
            raise JournalError(f"journal entry {entry_id}: manifest.json is unreadable ({e}); "
                               f"inspect or move away {shown}") from None
        _check_signed(manifest, body, digest, mac, entry_id, shown)
        _bound_here(entry, self.project, entry_id, shown)
        safety.check_entry(entry, entry_id)
        result = Entry(folder, entry, self)
        if verify:
            result.verify()
        return result

    def resolve(self, wanted: str | None) -> str:
        """An entry id from an exact id, a unique prefix, or a sequence number; None: the latest entry."""
        ids = self.ids()
        if not ids:
            raise JournalError(f"no fix journal in {self.root}; nothing to undo")
        if wanted is None:
            return ids[-1]
        found = _matching(ids, wanted)
        if found is not None:
            return found
        known = ", ".join(ids[-5:])
        raise JournalError(f"no single journal entry matches '{wanted}' (latest: {known}); see `olmo-doctor fix "
                           "--history`")

    def create(self, data: dict[str, Any]) -> Entry:
        """A new entry, bound to this project (its signed body names the project folder)."""
        ids = self.ids()
        seq = int(ids[-1].split("-", 1)[0]) + 1 if ids else 1
        entry_id = f"{seq:04d}-{time.strftime('%Y%m%d-%H%M%S')}"
        where = self._pinned(create=True)
        assert where is not None
        os.mkdir(where / entry_id, 0o700)  # new: an entry folder that already exists is not ours to reuse
        folder = self.pins.folder(where, entry_id)
        assert folder is not None
        entry = Entry(folder, {"id": entry_id, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status":
                               "in_progress", "steps": [], "files": [], "wheels": [], **data,
                               "project": str(self.project)}, self)
        try:
            entry.save()
        except OSError as e:  # a disk full before anything ran: leave no half entry that blocks the next run
            entry.remove()
            raise UsageError(f"cannot write the fix journal in {self.root} ({e.strerror or e}); nothing was "
                             "changed. Free some space and run it again") from None
        except BaseException:
            entry.remove()
            raise
        return entry

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One fix run or undo per project at a time."""
        where = self._pinned(create=True)
        assert where is not None
        # O_NOFOLLOW and no truncation: a `.lock` planted as a symlink must not clobber the file it points to;
        # O_NONBLOCK: a `.lock` planted as a FIFO must not block the open (it fails or is refused as not a file)
        try:
            fd = os.open(where / ".lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o600)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(errno.EINVAL, "not a regular file")
        except OSError as e:
            raise UsageError(f"cannot open {self.root / '.lock'} ({e.strerror or e}); move it away") from None
        with os.fdopen(fd, "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"another `olmo-doctor fix` is running in {self.project}; wait for it") from None
            yield


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _empty(folder: Path) -> None:
    """Remove what is inside a pinned folder (never following a symlink in it)."""
    for name in os.listdir(folder):
        path = folder / name
        if _is_folder(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def _bound_here(entry: Any, project: Path, entry_id: str, shown: Path) -> None:
    """An entry undoes only in the project it was written for: a signed entry copied from project A into B names
    A, and B's files are not what it backed up."""
    wrote_for = entry.get("project") if isinstance(entry, dict) else None
    if wrote_for != str(project):
        raise JournalError(f"journal entry {entry_id} was written for {wrote_for or 'no project'}, not {project}; "
                           f"refusing to use it here (inspect or move away {shown})")
