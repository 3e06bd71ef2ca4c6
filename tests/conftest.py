"""Session-wide test setup: an isolated user cache and the --update-goldens option (helpers live in
tests/helpers.py)."""

from __future__ import annotations

import os

import pytest
from helpers import UPDATE_GOLDENS_ENV


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true",
                     help="rewrite tests/goldens/ from what the code produces now (review the diff, then commit)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--update-goldens"):
        os.environ[UPDATE_GOLDENS_ENV] = "1"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the real ~/.cache/olmo-doctor."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-state"))  # the journal key
