"""A relative XDG_CACHE_HOME ("cache", "relative/dir", left over from a script) is ignored, as the XDG Base
Directory spec says ("If an implementation encounters a relative path in any of these variables it should consider
the path invalid and ignore it"): otherwise `olmo` and `olmo-doctor` wrote their caches into whatever folder they
ran in (found by a red-team pass: olmo's owner records appeared in the working folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo.cache import cache_root
from olmo_doctor.resources import user_cache_dir


@pytest.mark.parametrize("value", ["relative/dir", "cache", "./x", ""])
def test_a_relative_or_empty_cache_home_means_the_default(value: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    monkeypatch.chdir(tmp_path)
    assert cache_root("olmo") == tmp_path / "home" / ".cache" / "olmo"
    assert user_cache_dir() == tmp_path / "home" / ".cache" / "olmo-doctor"


def test_an_absolute_cache_home_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root("olmo") == tmp_path / "xdg" / "olmo"
    assert user_cache_dir() == tmp_path / "xdg" / "olmo-doctor"
