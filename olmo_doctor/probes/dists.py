"""Installed distribution versions, fast: read from `name-version.dist-info` folder names on sys.path (the
wheel spec and PEP 376 fix that naming) instead of importlib.metadata, whose import and METADATA parsing cost
~15 ms per command. importlib.metadata is still asked when sys.path holds old-style .egg entries."""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache

_DIST_INFO = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+?)-(?P<version>[^-]+?)\.(?:dist-info|egg-info)$")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """Normalized name -> version for the first occurrence on sys.path (what an import would see)."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            m = _DIST_INFO.match(name)
            if m:
                found.setdefault(_normalize(m.group("name")), m.group("version"))
    return found


def version(name: str) -> str | None:
    hit = _index().get(_normalize(name))
    if hit is not None or not any(entry.endswith(".egg") for entry in sys.path):
        return hit
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
