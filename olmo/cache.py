"""Small JSON caches under $XDG_CACHE_HOME (default ~/.cache): a cache is never an error.

A missing, unreadable or damaged entry reads as None and the caller measures again; a cache that cannot be written
(a read-only home, a full disk) only costs the next run that measurement.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from olmo.fsutil import atomic_write_bytes
from olmo_common.bounded.data import load_json


def cache_root(app: str) -> Path:
    """$XDG_CACHE_HOME/<app>, else ~/.cache/<app>; created on demand by writers. A relative XDG_CACHE_HOME is
    ignored, as the XDG spec says (it would put caches into whatever folder a command runs in)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / app


def read_json(path: Path) -> object | None:
    """The JSON value cached at `path`, or None when absent, unreadable or not JSON."""
    try:
        return load_json(path, "cache entry")
    except (OSError, ValueError, RecursionError):
        return None


def write_json(path: Path, value: object) -> None:
    """Write a cache entry atomically (temp file, then rename); an OSError only loses the entry."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(value).encode())
    except OSError:
        pass
