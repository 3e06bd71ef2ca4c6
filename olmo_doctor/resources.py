"""Find the project's data folders (known_issues/, recipes/) in a checkout or an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`known_issues` or `recipes`: the top-level folder of a checkout, else the copy shipped in the package."""
    for candidate in (_PKG.parent / name, _PKG / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"olmo-doctor data folder '{name}' not found next to {_PKG}")


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/olmo-doctor (default ~/.cache/olmo-doctor); created on demand by callers."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "olmo-doctor"
