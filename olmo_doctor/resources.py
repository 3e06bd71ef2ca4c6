"""Find the project's data folders (known_issues/, recipes/) in a checkout or an installed wheel."""

from __future__ import annotations

import json
import os
from pathlib import Path

from olmo_common.atomic import atomic_write
from olmo_common.bounded.data import load_json

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`known_issues` or `recipes`: the top-level folder of a checkout, else the copy shipped in the package."""
    for candidate in (_PKG.parent / name, _PKG / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"olmo-doctor data folder '{name}' not found next to {_PKG}")


def read_cache(path: Path) -> object | None:
    """A JSON value cached at `path`, or None when absent or unreadable (a cache is never an error)."""
    try:
        return load_json(path, "cache entry")
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
    """$XDG_CACHE_HOME/olmo-doctor (default ~/.cache/olmo-doctor); created on demand by callers. A relative
    XDG_CACHE_HOME is ignored, as the XDG spec says (it would put the cache into whatever folder `check` runs in)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = str(Path.home() / ".cache")
    return Path(base) / "olmo-doctor"
