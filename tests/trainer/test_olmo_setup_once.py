"""One `olmo train` is one setup pass: the config validated once, the data opened once, `init_from` resolved once,
and what preflight found before the doctor gate is what the loop trains on (unless run_dir changed meanwhile)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import olmo.preflight
from olmo import checkpoint
from olmo.recipe import to_yaml

Cli = Callable[..., tuple[int, str, str]]


def _count(monkeypatch: pytest.MonkeyPatch, calls: Counter[str], module: Any, name: str) -> None:
    real = getattr(module, name)

    def counted(*a: Any, **k: Any) -> Any:
        calls[name] += 1
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each setup step ran, counted where preflight calls them."""
    c: Counter[str] = Counter()
    for name in ("validate", "open_source", "init_checkpoint", "build_data"):
        _count(monkeypatch, c, olmo.preflight, name)
    return c


def _recipe(tmp: Path, cfg: Any) -> Path:
    r = tmp / "r.yaml"
    r.write_text(to_yaml(cfg))
    return r


def test_cli_train_sets_up_once(cli: Cli, calls: Counter[str], tmp_path: Path, tiny_data: Path,
                                micro: Callable[..., Any]) -> None:
    cfg = micro(tiny_data, tmp_path / "run", steps=2)
    code, _, err = cli("train", str(_recipe(tmp_path, cfg)), "--skip-doctor")
    assert code == 0, err
    # the CLI validates before its slow-step warning; preflight and setup do not validate again
    assert calls == Counter({"build_data": 1, "open_source": 1}), calls
    assert checkpoint.latest(tmp_path / "run") is not None


def test_cli_train_with_init_from_resolves_it_once(cli: Cli, calls: Counter[str], tmp_path: Path, tiny_data: Path,
                                                   micro: Callable[..., Any]) -> None:
    first = micro(tiny_data, tmp_path / "first", steps=2)
    assert cli("train", str(_recipe(tmp_path, first)), "--skip-doctor")[0] == 0
    calls.clear()
    second = micro(tiny_data, tmp_path / "second", steps=2)
    code, out, err = cli("train", str(_recipe(tmp_path, second)), "--skip-doctor", "--init-from",
                         str(tmp_path / "first"))
    assert code == 0, err
    assert calls["init_checkpoint"] == 1 and calls["open_source"] == 1, calls
    assert "initialised the weights from" in out


def test_library_train_runs_preflight_itself_once(calls: Counter[str], tmp_path: Path, tiny_data: Path,
                                                  micro: Callable[..., Any]) -> None:
    from olmo.train import train

    res = train(micro(tiny_data, tmp_path / "run", steps=2))
    assert res.step == 2
    assert calls == Counter({"validate": 1, "build_data": 1, "open_source": 1}), calls


def test_checkpoints_appearing_after_preflight_are_not_trained_over(tmp_path: Path, tiny_data: Path,
                                                                    micro: Callable[..., Any]) -> None:
    """Preflight found an empty run_dir; another run left checkpoints there before this one took the lock (while
    the doctor ran): setup looks again and refuses, as preflight would have, instead of overwriting them."""
    from olmo.config import ConfigError
    from olmo.train import train

    cfg = micro(tiny_data, tmp_path / "run", steps=2)
    checked = olmo.preflight.preflight(cfg, resume=False)
    train(micro(tiny_data, tmp_path / "run", steps=2))  # the other run
    saved = sorted(p.name for p in (tmp_path / "run" / checkpoint.CHECKPOINTS).iterdir())
    with pytest.raises(ConfigError, match="already has checkpoints"):
        train(cfg, checked=checked)
    assert sorted(p.name for p in (tmp_path / "run" / checkpoint.CHECKPOINTS).iterdir()) == saved
