"""Unmet requirements of the installed distributions (what `pip check` reports), from their metadata alone.

Each installed distribution's `Requires-Dist` lines are read with importlib.metadata and judged with
packaging.requirements: a requirement whose marker holds here (extras are left out: pip records no trace of which
extras were asked for) is unmet when the named distribution is absent or its version is outside the specifier.
No pip subprocess. Reading every METADATA file costs tens of milliseconds, so the answer is cached until a
site-packages folder changes (installing, upgrading or removing a package changes its folder's mtime).

Each unmet requirement becomes one line of the fact `python.unmet_requirements`, in a fixed shape that
`olmo_doctor/env_checks.py` parses back:  "<dist> <version> requires <requirement>; has <version>|missing".
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterable

from olmo_doctor.resources import read_cache, user_cache_dir, write_cache

LINE = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) requires (?P<req>.+); (?:has (?P<has>\S+)|missing)$")


def site_dirs(paths: Iterable[str] | None = None) -> list[str]:
    return [p for p in (sys.path if paths is None else paths) if p.endswith(("site-packages", "dist-packages"))]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def unmet_requirements(paths: Iterable[str] | None = None, cache: bool = True) -> list[str]:
    """Every unmet requirement of the distributions under these site-packages folders (default: sys.path's)."""
    dirs = site_dirs(paths)
    stamp = hashlib.sha256("\0".join(f"{p}:{_mtime(p)}" for p in dirs).encode()).hexdigest()[:16]
    path = user_cache_dir() / "unmet-requirements" / f"{stamp}.json"
    cached = read_cache(path) if cache else None
    if isinstance(cached, list):
        return [str(x) for x in cached]
    found = scan(dirs)
    if cache:
        write_cache(path, found)
    return found


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def scan(dirs: list[str]) -> list[str]:
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    installed: dict[str, tuple[str, list[str]]] = {}
    for dist in metadata.distributions(path=dirs):
        name = dist.metadata["Name"]
        if name:  # the first one on the path wins, as for an import
            installed.setdefault(_norm(name), (dist.version, list(dist.requires or [])))
    out: list[str] = []
    for key, (version, requires) in sorted(installed.items()):
        for line in requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            try:
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue
            except Exception:  # a marker this packaging cannot evaluate is not the user's problem
                continue
            have = installed.get(_norm(req.name))
            spec = f"{req.name}{req.specifier}"
            if have is None:
                out.append(f"{key} {version} requires {spec}; missing")
                continue
            try:
                ok = req.specifier.contains(Version(have[0]), prereleases=True)
            except InvalidVersion:
                continue  # OD203 reports non-PEP 440 versions
            if not ok:
                out.append(f"{key} {version} requires {spec}; has {have[0]}")
    return out
