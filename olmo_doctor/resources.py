"""Find the project's data folders (known_issues/, recipes/) in a checkout or an installed wheel."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`known_issues` or `recipes`: the top-level folder of a checkout, else the copy shipped in the package."""
    for candidate in (_PKG.parent / name, _PKG / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"olmo-doctor data folder '{name}' not found next to {_PKG}")


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write a temp file next to `path`, fsync, rename: readers see the old bytes or the new, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked; a full disk raises OSError(ENOSPC) here
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # os.write names no file: say which one failed
            raise OSError(e.errno, e.strerror or str(e), str(path)) from e
        raise


def read_cache(path: Path) -> object | None:
    """A JSON value cached at `path`, or None when absent or unreadable (a cache is never an error)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None


def write_cache(path: Path, value: object) -> None:
    """Write a JSON cache entry atomically (temp file, then rename); a read-only home only costs the cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(value).encode())
    except OSError:
        pass


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/olmo-doctor (default ~/.cache/olmo-doctor); created on demand by callers."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "olmo-doctor"
