"""Checks that keep a fix journal data, never instructions: where it may live, what it may name.

`fix --undo` writes files, reinstalls wheels and runs pip from what a journal says. A journal that came with a
cloned repository, or was edited, must not be able to steer that anywhere: every check here refuses with one
line (JournalError, exit 2) before anything is changed.

    state_dir(project)          .olmo-doctor (and its journal/) are real folders owned by this user, not symlinks
    member(folder, rel, id)     a backup, wheel, log or manifest: one of our own names inside the entry's folder
    project_file(project, rel)  a file the run changed: relative, inside the project, reached through no symlink
    check_entry(data, id)       the manifest's fields have the types and shapes fix --apply writes
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from olmo_doctor.errors import UsageError
from olmo_doctor.shell import has_control

STATE_DIR = ".olmo-doctor"
_ENTRY_ID = re.compile(r"^\d{4,}-\d{8}-\d{6}$")
_MEMBER = re.compile(r"^(manifest\.json|files/\d+|logs/\d+\.log|wheels/[A-Za-z0-9][A-Za-z0-9._+-]*\.whl)$")
_DIST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+!_-]*$")
_EXTRAS = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"})


class JournalError(UsageError):
    """A journal entry is missing, edited, corrupted, or cannot be used for what was asked."""


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def state_dir(project: Path) -> None:
    """Refuse a .olmo-doctor (or .olmo-doctor/journal) that is a symlink, a file, or someone else's folder."""
    for path in (project / STATE_DIR, project / STATE_DIR / "journal"):
        st = _lstat(path)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            raise JournalError(f"{path} is a symlink; olmo-doctor keeps its env file and journal in a real folder "
                               "there, so it refuses to follow it (remove the link)")
        if not stat.S_ISDIR(st.st_mode):
            raise JournalError(f"{path} is a file, but olmo-doctor keeps a folder there; move it away")
        if st.st_uid != os.getuid():
            raise JournalError(f"{path} belongs to another user (uid {st.st_uid}); olmo-doctor only uses its own "
                               "folder there (move it away)")


def member(folder: Path, rel: object, entry_id: str, shown: Path | None = None) -> Path:
    """A file of the entry's own folder, by one of the names fix --apply gives them; never a symlink. `shown` is
    the folder as the user names it (`folder` may be a pinned /proc/self/fd path)."""
    shown = shown or folder
    if not isinstance(rel, str) or not _MEMBER.match(rel):
        raise JournalError(f"journal entry {entry_id} names {rel!r} as one of its files; only its own "
                           f"files/, wheels/ and logs/ are allowed (inspect or move away {shown})")
    path = folder
    for part in rel.split("/"):
        path = path / part
        st = _lstat(path)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise JournalError(f"journal entry {entry_id}: {rel} is a symlink; refusing to read it "
                               f"(inspect or move away {shown})")
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):  # a fifo would hang the read, a device feed it forever
        raise JournalError(f"journal entry {entry_id}: {rel} is not a regular file; refusing to read it "
                           f"(inspect or move away {shown})")
    return path


def _relative_parts(rel: object, bad: str) -> tuple[str, ...]:
    """The parts of a plain relative POSIX path that does not reach into the journal; JournalError(bad) else."""
    if not isinstance(rel, str) or not rel or has_control(rel) or "\\" in rel:
        raise JournalError(bad)
    parts = PurePosixPath(rel).parts
    if PurePosixPath(rel).is_absolute() or any(p in ("..", ".", "") for p in parts) or parts[:2] == (
            STATE_DIR, "journal"):
        raise JournalError(bad)
    return parts


def project_file(project: Path, rel: object, entry_id: str) -> Path:
    """The project file a journal record names, confined to the project and reached through no symlink."""
    bad = f"journal entry {entry_id} names {rel!r}, which is not a file inside the project; refusing to use it"
    path = project
    for part in _relative_parts(rel, bad):
        path = path / part
        st = _lstat(path)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise JournalError(f"{bad} ({path} is a symlink)")
    root = project.resolve()
    if not path.resolve().is_relative_to(root) or path.resolve() == root:
        raise JournalError(bad)
    return path


def _dist_entry_ok(name: object, pin: object) -> bool:
    """`name: [version, direct_url.json text or None]`."""
    return (_matches(name, _DIST) and isinstance(pin, list) and len(pin) == 2 and _matches(pin[0], _VERSION)
            and (pin[1] is None or isinstance(pin[1], str)))


def _dists_ok(value: object) -> bool:
    if value is None:
        return True
    return isinstance(value, dict) and all(_dist_entry_ok(k, v) for k, v in value.items())


def _file_problem(rec: dict[str, Any]) -> str | None:
    if not isinstance(rec.get("path"), str) or not isinstance(rec.get("existed"), bool):
        return "a file record has no path"
    if rec["existed"] and not (isinstance(rec.get("backup"), str) and isinstance(rec.get("sha256_before"), str)):
        return f"the record of {rec['path']!r} has no checked backup"
    if rec.get("mode") is not None and not (isinstance(rec["mode"], int) and 0 <= rec["mode"] <= 0o777):
        return f"the record of {rec['path']!r} has an odd file mode"
    return None


def _matches(value: object, pattern: re.Pattern[str]) -> bool:
    return isinstance(value, str) and pattern.match(value) is not None


def _wheel_ok(w: dict[str, Any]) -> bool:
    extras = w.get("extras")
    return (_matches(w.get("name"), _DIST) and _matches(w.get("version"), _VERSION)
            and isinstance(w.get("sha256"), str) and isinstance(extras, dict)
            and set(extras) <= _EXTRAS and all(isinstance(v, str) for v in extras.values()))


def _shape_problem(data: Any, entry_id: str) -> str | None:
    """The id, the status, and the three lists of records."""
    if not isinstance(data, dict) or data.get("id") != entry_id:
        return "its id does not match its folder"
    if not isinstance(data.get("status"), str):
        return "status is not a string"
    for key in ("files", "wheels", "steps"):
        if not isinstance(data.get(key), list) or not all(isinstance(x, dict) for x in data[key]):
            return f"{key} is not a list of records"
    return None


def _problem(data: Any, entry_id: str) -> str | None:
    """What in an entry's fields is not what fix --apply writes, or None."""
    if (shape := _shape_problem(data, entry_id)) is not None:
        return shape
    for rec in data["files"]:
        if (problem := _file_problem(rec)) is not None:
            return problem
    if not all(_wheel_ok(w) for w in data["wheels"]):
        return "a saved wheel record is malformed"
    return _dists_problem(data)


def _dists_problem(data: Any) -> str | None:
    """What is wrong with the entry's lists of distributions or its Python, or None."""
    for key in ("dists_before", "dists_after"):
        if not _dists_ok(data.get(key)):
            return f"{key} names something that is not a distribution and version"
    if data.get("python") is not None and not isinstance(data["python"], str):
        return "python is not a path"
    return None


def check_entry(data: Any, entry_id: str) -> None:
    if (problem := _problem(data, entry_id)) is not None:
        raise JournalError(f"journal entry {entry_id} is malformed ({problem}); refusing to use it")
