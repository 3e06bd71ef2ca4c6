"""Unmet requirements of the installed distributions (what `pip check` reports), from their metadata alone.

Each installed distribution's `Requires-Dist` lines are read with importlib.metadata and judged with
packaging.requirements: a requirement whose marker holds here (extras are left out: pip records no trace of which
extras were asked for) is unmet when the named distribution is absent or its version is outside the specifier.
No pip subprocess. Reading every METADATA file costs tens of milliseconds, so the answer is cached until a
site-packages folder changes (installing, upgrading or removing a package changes its folder's mtime).

Each unmet requirement becomes one line of the fact `python.unmet_requirements`, in a fixed shape that
`olmo_doctor/checks/requirements.py` parses back:  "<dist> <version> requires <requirement>; has <version>|missing".
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from olmo_doctor.resources import read_cache, user_cache_dir, write_cache

LINE = re.compile(r"^(?P<dist>\S+) (?P<version>\S+) requires (?P<req>.+); (?:has (?P<has>\S+)|missing)$")


def site_dirs(paths: Iterable[str] | None = None) -> list[str]:
    return [p for p in (sys.path if paths is None else paths) if p.endswith(("site-packages", "dist-packages"))]


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def cached_for_site(kind: str, compute: Callable[[list[str]], list[str]], paths: Iterable[str] | None = None,
                    cache: bool = True) -> list[str]:
    """compute(the site-packages folders), cached under `kind` until one of those folders changes (installing or
    removing a package changes its folder's mtime)."""
    dirs = site_dirs(paths)
    stamp = hashlib.sha256("\0".join(f"{p}:{_mtime(p)}" for p in dirs).encode()).hexdigest()[:16]
    path = user_cache_dir() / kind / f"{stamp}.json"
    cached = read_cache(path) if cache else None
    if isinstance(cached, list):
        return [str(x) for x in cached]
    found = compute(dirs)
    if cache:
        write_cache(path, found)
    return found


def unmet_requirements(paths: Iterable[str] | None = None, cache: bool = True) -> list[str]:
    """Every unmet requirement of the distributions under these site-packages folders (default: sys.path's)."""
    return cached_for_site("unmet-requirements", scan, paths, cache)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(dirs: list[str]) -> dict[str, tuple[str, list[str]]]:
    """normalised name -> (version, Requires-Dist lines) of each distribution on the path."""
    from importlib import metadata

    installed: dict[str, tuple[str, list[str]]] = {}
    for dist in metadata.distributions(path=dirs):
        name = dist.metadata["Name"]
        if name:  # the first one on the path wins, as for an import
            installed.setdefault(_norm(name), (dist.version, list(dist.requires or [])))
    return installed


def _applies(line: str) -> Any:
    """The requirement on one Requires-Dist line when it applies here (no extra asked for), else None."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(line)
    except InvalidRequirement:
        return None
    try:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            return None
    except Exception:  # a marker this packaging cannot evaluate is not the user's problem
        return None
    return req


def _unmet(req: Any, have: tuple[str, list[str]] | None) -> str | None:
    """What is wrong with an installed requirement: "missing", "has X", or None when it is met."""
    from packaging.version import InvalidVersion, Version

    if have is None:
        return "missing"
    try:
        ok = req.specifier.contains(Version(have[0]), prereleases=True)
    except InvalidVersion:
        return None  # OD203 reports non-PEP 440 versions
    return None if ok else f"has {have[0]}"


def scan(dirs: list[str]) -> list[str]:
    installed = _installed(dirs)
    out: list[str] = []
    for key, (version, requires) in sorted(installed.items()):
        for req in filter(None, map(_applies, requires)):
            problem = _unmet(req, installed.get(_norm(req.name)))
            if problem:
                out.append(f"{key} {version} requires {req.name}{req.specifier}; {problem}")
    return out


def trainer_requirement(name: str, dist: str = "olmo-doctor") -> str | None:
    """The requirement olmo-doctor (with its trainer) declares on `name`, as its installed metadata says
    ("torch>=2.6"): the floor `olmo train` really needs, not a copy of it. None when the distribution is not
    installed or does not require `name` (extras are left out: they are not always installed)."""
    return _requirements_of(dist).get(_norm(name))


@functools.lru_cache(maxsize=8)
def _requirements_of(dist: str) -> dict[str, str]:
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        lines = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in lines:
        try:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
        except Exception:  # an unparsable requirement or marker says nothing about the floor
            continue
        out.setdefault(_norm(req.name), f"{req.name}{req.specifier}")
    return out
