"""The wheel cache: built wheels under the user cache, keyed by everything that makes a binary compatible.

Layout: <user cache>/wheels/<package>/<digest>/<wheel file> plus key.json (the plan's cache_key: package,
version with subset tag, subset, torch version, torch CUDA, nvcc, archs, Python ABI, C++11 ABI, platform and
source). A new torch, another GPU arch or another Python gives another digest, so a stale wheel is never
installed; the same request installs from here with one `pip install` of a local file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from olmo_doctor.build.plan import BuildPlan
from olmo_doctor.resources import user_cache_dir


def cache_root() -> Path:
    return user_cache_dir() / "wheels"


def entry_dir(plan: BuildPlan, root: Path | None = None) -> Path:
    return (root or cache_root()) / plan.package / plan.cache_digest


def lookup(plan: BuildPlan, root: Path | None = None) -> Path | None:
    """The cached wheel for this plan's key, if one was stored and its key still matches."""
    d = entry_dir(plan, root)
    try:
        key = json.loads((d / "key.json").read_text())
    except (OSError, ValueError):
        return None
    wheels = sorted(d.glob("*.whl"))
    return wheels[0] if wheels and key == plan.cache_key else None


def store(plan: BuildPlan, wheel: Path, extra: dict[str, Any] | None = None, root: Path | None = None) -> Path:
    """Copy the wheel in atomically (temp dir + rename) so a crash never leaves a half entry behind."""
    d = entry_dir(plan, root)
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=".tmp-"))
    shutil.copy2(wheel, tmp / wheel.name)
    (tmp / "key.json").write_text(json.dumps(plan.cache_key, indent=1, sort_keys=True))
    (tmp / "build.json").write_text(json.dumps(extra or {}, indent=1, sort_keys=True))
    if d.exists():
        shutil.rmtree(d)
    os.replace(tmp, d)
    return d / wheel.name


def install(wheel: Path, python: str) -> subprocess.CompletedProcess[str]:
    """Install a local wheel into the target interpreter: no index, no deps, replacing any other build."""
    argv = [
        python,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--force-reinstall",
        "--quiet",
        str(wheel),
    ]
    return subprocess.run(argv, capture_output=True, text=True)
