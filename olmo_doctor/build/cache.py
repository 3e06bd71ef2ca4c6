"""The wheel cache: built wheels under the user cache, keyed by everything that makes a binary compatible.

Layout: <user cache>/wheels/<package>/<digest>/<wheel file> plus key.json (the plan's cache_key: package,
version with subset tag, subset, torch version, torch CUDA, nvcc, archs, Python ABI, C++11 ABI, platform and
source) and wheel.json (the wheel's file name and the sha256 it had when we stored it). A new torch, another GPU
arch or another Python gives another digest, so a stale wheel is never installed; the same request installs from
here with one `pip install` of a local file.

A cache folder is only a folder: anyone who can write it can drop a wheel in, and a record beside it. So a wheel
is installed as "cached" only when it is the exact file we recorded, its bytes still hash to what we recorded, and
the record carries an HMAC under this user's key (fix/journal_key.py); anything else (no record, a record someone
else wrote, another file, a symlink, changed bytes) is refused with a reason and rebuilt. `install` copies the
wheel into a private folder and checks that copy, so the bytes pip installs are the bytes that were checked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from olmo_common.bounded.data import load_json
from olmo_common.bounded.files import sha256_file
from olmo_doctor.build.plan import BuildPlan
from olmo_doctor.errors import UsageError
from olmo_doctor.fix import journal_key
from olmo_doctor.isolation import child_env
from olmo_doctor.resources import user_cache_dir

RECORD = "wheel.json"
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.whl$")


def cache_root() -> Path:
    return user_cache_dir() / "wheels"


def entry_dir(plan: BuildPlan, root: Path | None = None) -> Path:
    return (root or cache_root()) / plan.package / plan.cache_digest


def _symlinked(*folders: Path) -> Path | None:
    """The first of these cache folders that is a symlink: the cache is only ever real folders of this user's,
    so a link there (into a shared or attacker-written folder) is refused, never followed."""
    return next((f for f in folders if f.is_symlink()), None)


def _link_refusal(link: Path) -> str:
    return f"{link} is a symlink; olmo-doctor keeps its wheel cache in real folders only (remove the link)"


def find(plan: BuildPlan, root: Path | None = None) -> tuple[Path | None, str | None]:
    """(the cached wheel, None) when one was stored for this key and is intact; (None, why it was refused) when
    a cache entry exists but cannot be trusted; (None, None) when there is none."""
    d = entry_dir(plan, root)
    link = _symlinked(root or cache_root(), d.parent, d)
    if link is not None:
        return None, _link_refusal(link) + "; not using the cached wheel there"
    try:
        key = load_json(d / "key.json", "wheel cache record")
    except (OSError, ValueError, RecursionError):
        return None, None
    if key != plan.cache_key:
        return None, None
    return _trusted(d, key)


def _trusted(d: Path, key: object) -> tuple[Path | None, str | None]:
    """The wheel of cache entry d when its record is olmo-doctor's own and the wheel matches it, else why not."""
    try:
        record = load_json(d / RECORD, "wheel cache record")
        name, digest = record["file"], record["sha256"]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return None, f"{d} has no record of the wheel it holds; refusing it"
    if not isinstance(name, str) or not _WHEEL_NAME.match(name) or not isinstance(digest, str):
        return None, f"{d / RECORD} is malformed; refusing the cached wheel"
    try:
        signed = journal_key.valid(_signed(name, digest, key), record.get("mac"))
    except UsageError as e:  # no usable key: nothing in the cache can be trusted
        return None, f"{d} cannot be checked ({e}); refusing it"
    if not signed:  # whoever can write the cache folder can also write a record that matches their wheel
        return None, f"{d / RECORD} was not written by olmo-doctor for this user; refusing the cached wheel"
    problem = _wheel_problem(d / name, digest)
    return (None, problem) if problem else (d / name, None)


def _wheel_problem(wheel: Path, digest: str) -> str | None:
    """Why the stored wheel cannot be used (missing, not a regular file, changed since it was built), or None."""
    try:
        st = os.lstat(wheel)
    except OSError:
        return f"{wheel} is missing"
    if not stat.S_ISREG(st.st_mode):
        return f"{wheel} is not a regular file; refusing it"
    if sha256_file(wheel) != digest:
        return f"{wheel} does not match the sha256 recorded when it was built; refusing it"
    return None


def _signed(name: str, digest: str, key: object) -> bytes:
    """What a record's HMAC (the user's journal key) covers: the wheel's name, its sha256 and the cache key."""
    return json.dumps({"file": name, "sha256": digest, "key": key}, sort_keys=True, separators=(",", ":")).encode()


def lookup(plan: BuildPlan, root: Path | None = None) -> Path | None:
    """The cached wheel for this plan's key, if one was stored, its key still matches and its bytes are intact."""
    return find(plan, root)[0]


def _describes(record: object, name: str) -> bool:
    """A record of this wheel file, with a sha256."""
    return isinstance(record, dict) and record.get("file") == name and isinstance(record.get("sha256"), str)


def recorded_sha256(wheel: Path) -> str | None:
    """The sha256 stored beside a cached wheel by this user's olmo-doctor (its record's HMAC checks), or None."""
    if _symlinked(wheel.parent.parent.parent, wheel.parent.parent, wheel.parent) is not None:
        return None
    try:
        record = load_json(wheel.parent / RECORD, "wheel cache record")
        key = load_json(wheel.parent / "key.json", "wheel cache record")
    except (OSError, ValueError, RecursionError):
        return None
    ok = _describes(record, wheel.name)
    try:
        ok = ok and journal_key.valid(_signed(wheel.name, record["sha256"], key), record.get("mac"))
    except UsageError:
        return None
    return record["sha256"] if ok else None


def store(plan: BuildPlan, wheel: Path, extra: dict[str, Any] | None = None, root: Path | None = None) -> Path:
    """Copy the wheel in atomically (temp dir + rename) so a crash never leaves a half entry behind."""
    d = entry_dir(plan, root)
    link = _symlinked(root or cache_root(), d.parent)
    if link is not None:
        raise UsageError(_link_refusal(link) + f"; the wheel built is at {wheel}")
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=".tmp-"))
    shutil.copyfile(wheel, tmp / wheel.name)
    digest = sha256_file(tmp / wheel.name)  # the bytes in the cache, as copied
    record = {"file": wheel.name, "sha256": digest, "mac": journal_key.sign(_signed(wheel.name, digest,
                                                                                   plan.cache_key))}
    (tmp / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True))
    (tmp / "key.json").write_text(json.dumps(plan.cache_key, indent=1, sort_keys=True))
    (tmp / "build.json").write_text(json.dumps(extra or {}, indent=1, sort_keys=True))
    if d.exists() or d.is_symlink():
        if d.is_symlink() or not d.is_dir():
            d.unlink()
        else:
            shutil.rmtree(d)
    os.replace(tmp, d)
    return d / wheel.name


def install(wheel: Path, python: str, sha256: str | None = None) -> subprocess.CompletedProcess[str]:
    """Install a local wheel into the target interpreter: no index, no deps, replacing any other build.

    The wheel is copied to a private folder and the copy checked against `sha256` (default: the one recorded
    beside a cached wheel; none recorded is a refusal), so the file cannot be swapped between check and install."""
    expected = sha256 if sha256 is not None else recorded_sha256(wheel)
    if expected is None:
        return subprocess.CompletedProcess([], 1, "", f"{wheel} has no recorded sha256; refusing to install it")
    with tempfile.TemporaryDirectory(prefix="olmo-doctor-wheel-") as private:
        target = Path(private) / wheel.name
        shutil.copyfile(wheel, target)
        if sha256_file(target) != expected:
            return subprocess.CompletedProcess([], 1, "", f"{wheel} does not match its recorded sha256 "
                                               f"{expected}; refusing to install it")
        # -I: the verified wheel is installed by the environment's pip, never by a pip/ in the working folder
        argv = [python, "-I", "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall", "--quiet",
                str(target)]
        return subprocess.run(argv, capture_output=True, text=True, env=child_env())
