"""Shared test helpers: fixture paths, an isolated user cache, and the CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
H200 = FIXTURES / "machines" / "h200"


def shared_dir() -> Path | None:
    """The steering repo's shared/ folder (beside the checkout, or inside it), when present."""
    for candidate in (ROOT.parent / "shared", ROOT / "shared"):
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the real ~/.cache/olmo-doctor."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-state"))  # the journal key
