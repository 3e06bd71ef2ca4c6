"""The fix journal: one folder per `fix --apply` run, holding what ran and everything needed to undo it.

    <project>/.olmo-doctor/journal/<id>/
        manifest.json   {"format": 1, "sha256": <sha256 of the canonical entry JSON>, "entry": {...}}
        files/<n>       each file the run changed, byte for byte as it was before (none when the run created it)
        wheels/*.whl    installed distributions the run replaced or removed, repacked (wheelpack.py)
        logs/<n>.log    the full output of each command that ran

The entry records the plan, every command with its exit code, `pip freeze --all` before and after, and the
sha256 of every backup, wheel and log; the manifest carries the sha256 of the entry itself. Anything edited or
truncated afterwards is refused with one line (it catches accidents and meddling, not an attacker who rewrites
the checksums too: the journal is the user's own data). The manifest is rewritten atomically after every step,
so an interrupted run leaves an entry that `fix --undo` can still roll back.

The journal lives in the project, next to the env file it backs up. A project dir we cannot write is refused
rather than journaled elsewhere, so `fix --undo` always finds the journal where the changes are.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from olmo_doctor.errors import UsageError
from olmo_doctor.resources import atomic_write

FORMAT = 1
JOURNAL_DIR = ".olmo-doctor/journal"
_ID = re.compile(r"^(\d{4,})-\d{8}-\d{6}$")


class JournalError(UsageError):
    """A journal entry is missing, edited, corrupted, or cannot be used for what was asked."""


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
        manifest = {"format": FORMAT, "sha256": sha256_bytes(_canonical(self.data)), "entry": self.data}
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
            record["mode"] = path.stat().st_mode & 0o7777
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
            path = self.folder / rel
            if not path.is_file() or sha256_file(path) != digest:
                raise JournalError(f"journal entry {self.id}: {rel} is missing or changed since it was written; "
                                   f"refusing to use it (inspect or move away {self.folder})")


class Journal:
    def __init__(self, project: Path):
        self.project = project
        self.root = project / JOURNAL_DIR

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted((p.name for p in self.root.iterdir() if p.is_dir() and _ID.match(p.name)),
                      key=lambda i: int(i.split("-", 1)[0]))

    def load(self, entry_id: str, verify: bool = True) -> Entry:
        folder = self.root / entry_id
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
            entry, digest = manifest["entry"], manifest["sha256"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise JournalError(f"journal entry {entry_id}: manifest.json is unreadable ({e}); "
                               f"inspect or move away {folder}") from None
        if manifest.get("format") != FORMAT or sha256_bytes(_canonical(entry)) != digest:
            raise JournalError(f"journal entry {entry_id}: manifest.json was edited after it was written "
                               f"(checksum mismatch); refusing to use it (inspect or move away {folder})")
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
        entry.save()
        return entry

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One fix run or undo per project at a time."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"another `olmo-doctor fix` is running in {self.project}; wait for it") from None
            yield
