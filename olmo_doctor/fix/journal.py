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
rather than journaled elsewhere, so `fix --undo` always finds the journal where the changes are.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from olmo_doctor.errors import UsageError
from olmo_doctor.fix import journal_key, safety
from olmo_doctor.fix.safety import JournalError
from olmo_doctor.resources import atomic_write

FORMAT = 1
JOURNAL_DIR = ".olmo-doctor/journal"
_ID = re.compile(r"^(\d{4,})-\d{8}-\d{6}$")


__all__ = ["Entry", "Journal", "JournalError", "check_writable", "sha256_bytes", "sha256_file"]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _canonical(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


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
    """One journal entry: a folder and its manifest, saved atomically after every change."""

    def __init__(self, folder: Path, data: dict[str, Any]):
        self.folder = folder
        self.data = data

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
        (self.folder / sub).mkdir(exist_ok=True)
        atomic_write(self.folder / sub / name, data)
        return f"{sub}/{name}", sha256_bytes(data)

    def back_up_file(self, project: Path, rel: str) -> dict[str, Any]:
        """Record a file's state before the run changes it (saved before the change, so a crash can undo it)."""
        path = project / rel
        record: dict[str, Any] = {"path": rel, "existed": path.exists()}
        if path.exists():
            data = path.read_bytes()
            record["backup"], record["sha256_before"] = self._store("files", str(len(self.data["files"])), data)
            record["mode"] = path.stat().st_mode & 0o777  # never a setuid bit back from a journal
        self.data["files"].append(record)
        self.save()
        return record

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
            path = safety.member(self.folder, rel, self.id)
            if not path.is_file() or sha256_file(path) != digest:
                raise JournalError(f"journal entry {self.id}: {rel} is missing or changed since it was written; "
                                   f"refusing to use it (inspect or move away {self.folder})")

    def read_backup(self, rel: str, digest: str) -> bytes:
        """A backup's bytes from this entry's own folder, checked against its recorded sha256 as they are read."""
        data = safety.member(self.folder, rel, self.id).read_bytes()
        if sha256_bytes(data) != digest:
            raise JournalError(f"journal entry {self.id}: {rel} changed since it was written; refusing to restore "
                               f"it (inspect or move away {self.folder})")
        return data


class Journal:
    def __init__(self, project: Path):
        self.project = project
        self.root = project / JOURNAL_DIR

    def ids(self) -> list[str]:
        safety.state_dir(self.project)
        if not self.root.is_dir():
            return []
        return sorted((p.name for p in self.root.iterdir() if p.is_dir() and _ID.match(p.name)),
                      key=lambda i: int(i.split("-", 1)[0]))

    def load(self, entry_id: str, verify: bool = True) -> Entry:
        safety.state_dir(self.project)
        folder = safety.entry_folder(self.root, entry_id)
        try:
            manifest = json.loads(safety.member(folder, "manifest.json", entry_id).read_text())
            entry, digest, mac = manifest["entry"], manifest["sha256"], manifest.get("mac")
            body = _canonical(entry)
        except (OSError, ValueError, RecursionError, KeyError, TypeError) as e:
            raise JournalError(f"journal entry {entry_id}: manifest.json is unreadable ({e}); "
                               f"inspect or move away {folder}") from None
        if manifest.get("format") != FORMAT or sha256_bytes(body) != digest:
            raise JournalError(f"journal entry {entry_id}: manifest.json was edited after it was written "
                               f"(checksum mismatch); refusing to use it (inspect or move away {folder})")
        if not journal_key.valid(body, mac):
            raise JournalError(f"journal entry {entry_id} was not written by olmo-doctor for this user (its "
                               f"signature does not match; copied from elsewhere, or edited?); refusing to use it "
                               f"(inspect or move away {folder})")
        safety.check_entry(entry, entry_id)
        result = Entry(folder, entry)
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
        if wanted in ids:
            return wanted
        if wanted.isdigit():
            by_seq = [i for i in ids if int(i.split("-", 1)[0]) == int(wanted)]
            if by_seq:
                return by_seq[0]
        matches = [i for i in ids if i.startswith(wanted)]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(ids[-5:])
        raise JournalError(f"no single journal entry matches '{wanted}' (latest: {known}); see `olmo-doctor fix "
                           "--history`")

    def create(self, data: dict[str, Any]) -> Entry:
        ids = self.ids()
        seq = int(ids[-1].split("-", 1)[0]) + 1 if ids else 1
        entry_id = f"{seq:04d}-{time.strftime('%Y%m%d-%H%M%S')}"
        folder = self.root / entry_id
        folder.mkdir(parents=True)
        entry = Entry(folder, {"id": entry_id, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status":
                               "in_progress", "steps": [], "files": [], "wheels": [], **data})
        try:
            entry.save()
        except OSError as e:  # a disk full before anything ran: leave no half entry that blocks the next run
            shutil.rmtree(folder, ignore_errors=True)
            raise UsageError(f"cannot write the fix journal in {self.root} ({e.strerror or e}); nothing was "
                             "changed. Free some space and run it again") from None
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return entry

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One fix run or undo per project at a time."""
        safety.state_dir(self.project)
        self.root.mkdir(parents=True, exist_ok=True)
        safety.state_dir(self.project)
        # O_NOFOLLOW and no truncation: a `.lock` planted as a symlink must not clobber the file it points to
        try:
            fd = os.open(self.root / ".lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as e:
            raise UsageError(f"cannot open {self.root / '.lock'} ({e.strerror or e}); move it away") from None
        with os.fdopen(fd, "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"another `olmo-doctor fix` is running in {self.project}; wait for it") from None
            yield
