"""Python environment facts from package metadata (no imports of the packages themselves)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path

from packaging.version import InvalidVersion, Version

from olmo_doctor.facts import Facts
from olmo_doctor.probes import dists
from olmo_doctor.probes.requirements import unmet_requirements
from olmo_doctor.resources import read_cache, user_cache_dir, write_cache
from olmo_doctor.run import Runner

DISTS = {"pip": "pip", "setuptools": "setuptools", "wheel": "wheel", "packaging": "packaging"}


dist_version = dists.version


def invalid_versions() -> list[str]:
    """Installed distributions whose version is not PEP 440 (pip >= 24.1 refuses to work with them).

    Scanning every installed distribution costs ~10 ms, so the answer is cached until a sys.path folder changes
    (installing or removing a package changes its site-packages folder's mtime)."""
    site_dirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    stamp = hashlib.sha256("\0".join(f"{p}:{_mtime(p)}" for p in site_dirs).encode()).hexdigest()[:16]
    cache = user_cache_dir() / "invalid-versions" / f"{stamp}.json"
    cached = read_cache(cache)
    if isinstance(cached, list):
        return [str(x) for x in cached]
    bad = _scan_invalid_versions()
    write_cache(cache, bad)
    return bad


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _scan_invalid_versions() -> list[str]:
    from importlib import metadata

    bad = []
    for dist in metadata.distributions():
        raw = dist.metadata["Version"] or ""
        try:
            Version(raw)
        except InvalidVersion:
            bad.append(f"{dist.metadata['Name']}=={raw}")
    return sorted(set(bad))


def olmo_origin() -> str | None:
    """Which distribution provides `olmo`: this project, ai2-olmo (same module name), or None."""
    spec = find_spec("olmo")
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    mine = Path(__file__).resolve().parents[2] / "olmo"
    if origin.parent == mine:
        return "olmo-doctor"
    for dist_name in ("ai2-olmo", "olmo"):
        from importlib import metadata

        try:
            files = metadata.files(dist_name) or []
        except metadata.PackageNotFoundError:
            continue
        if any(str(f).startswith("olmo/") for f in files):
            return dist_name
    return str(origin.parent)


def ninja(run: Runner) -> Facts:
    # torch.utils.cpp_extension runs `ninja --version` from PATH; the pip package puts it in the venv's bin
    path = shutil.which("ninja") or shutil.which("ninja", path=os.path.dirname(sys.executable))
    if not path:
        return {"ninja.path": None, "ninja.version": None}
    out = run([path, "--version"])
    m = re.match(r"\s*(\d+(?:\.\d+)*)", out.stdout) if out.ok else None
    return {"ninja.path": path, "ninja.version": m.group(1) if m else None}


def probe(run: Runner) -> Facts:
    facts: Facts = {
        "python.version": "%d.%d.%d" % sys.version_info[:3],
        "python.executable": sys.executable,
        "python.venv": sys.prefix != sys.base_prefix,
        **{f"{key}.version": dist_version(dist) for key, dist in DISTS.items()},
        "python.invalid_versions": invalid_versions(),
        "python.unmet_requirements": unmet_requirements(),
        "olmo.module_origin": olmo_origin(),
    }
    facts.update(ninja(run))
    return facts
