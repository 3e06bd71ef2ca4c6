"""Python environment facts from package metadata (no imports of the packages themselves)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path

from packaging.version import InvalidVersion, Version

from olmo_common.bounded.files import read_bytes
from olmo_doctor.facts import Facts
from olmo_doctor.isolation import which
from olmo_doctor.probes import dists
from olmo_doctor.probes.requirements import cached_for_site, unmet_requirements
from olmo_doctor.run import Runner

DISTS = {"pip": "pip", "setuptools": "setuptools", "wheel": "wheel", "packaging": "packaging"}


dist_version = dists.version


def invalid_versions() -> list[str]:
    """Installed distributions whose version is not PEP 440 (pip >= 24.1 refuses to work with them).

    Scanning every installed distribution costs ~10 ms, so the answer is cached until a sys.path folder changes
    (installing or removing a package changes its site-packages folder's mtime)."""
    return cached_for_site("invalid-versions", _scan_invalid_versions)


def _scan_invalid_versions(_site_dirs: list[str]) -> list[str]:
    from importlib import metadata

    bad = []
    for dist in metadata.distributions():
        raw = dist.metadata["Version"] or ""
        try:
            Version(raw)
        except InvalidVersion:
            bad.append(f"{dist.metadata['Name']}=={raw}")
    return sorted(set(bad))


def olmo_owners() -> list[str]:
    """Installed distributions other than this project whose RECORD lists files of a top-level `olmo` package
    (ai2-olmo and any other): pip installs them into the same folder as ours without a word. Cached until a
    site-packages folder changes, like invalid_versions."""
    return cached_for_site("olmo-owners", _olmo_owners)


def _olmo_owners(site_dirs: list[str]) -> list[str]:
    return sorted({name for folder in site_dirs for name in _olmo_records(folder) if name != "olmo-doctor"})


def _olmo_records(folder: str) -> list[str]:
    """Names of the distributions in `folder` whose RECORD lists a file under olmo/."""
    try:
        infos = [e for e in os.listdir(folder) if e.endswith(".dist-info")]
    except OSError:
        return []
    out = []
    for info in infos:
        try:
            record = read_bytes(Path(folder, info, "RECORD"), "package metadata")
        except OSError:
            continue
        if record.startswith(b"olmo/") or b"\nolmo/" in record:
            out.append(info[: -len(".dist-info")].rsplit("-", 1)[0].replace("_", "-").lower())
    return out


def olmo_origin() -> str | None:
    """Which distribution provides `olmo`: this project, ai2-olmo (same module name), or None. Another
    distribution that installed files into our `olmo/` folder counts too: its files replaced ours."""
    spec = find_spec("olmo")
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    mine = Path(__file__).resolve().parents[2] / "olmo"
    if origin.parent == mine:
        owners = [o for o in olmo_owners() if _installed_here(o, mine.parent)]
        return owners[0] if owners else "olmo-doctor"
    return _providing_dist() or str(origin.parent)


def _providing_dist() -> str | None:
    """The known distribution (ai2-olmo, or one named olmo) whose files include a top-level olmo/, if any."""
    from importlib import metadata

    for dist_name in ("ai2-olmo", "olmo"):
        try:
            files = metadata.files(dist_name) or []
        except metadata.PackageNotFoundError:
            continue
        if any(str(f).startswith("olmo/") for f in files):
            return dist_name
    return None


def _installed_here(dist: str, folder: Path) -> bool:
    """Whether `dist`'s dist-info sits in `folder` (so its olmo/ files are the ones next to ours)."""
    norm = dist.replace("-", "_").lower()
    try:
        return any(e.lower().startswith(norm + "-") and e.endswith(".dist-info") for e in os.listdir(folder))
    except OSError:
        return False


def ninja(run: Runner) -> Facts:
    # torch.utils.cpp_extension runs `ninja --version` from PATH; the pip package puts it in the venv's bin
    path = which("ninja") or shutil.which("ninja", path=os.path.dirname(sys.executable))
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
