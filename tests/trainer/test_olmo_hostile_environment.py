"""The `olmo` error contract outside the input tables: an unusable cache, home or temp folder, a full disk
while exporting, paths that look like console markup or are not UTF-8, Python recipes and their bytecode, temp
names planted as symlinks, and a torn metrics line on resume. The good world and helpers are those of
test_olmo_bad_inputs (and the sweep's link and deep-nesting helpers)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_olmo_bad_inputs import (  # `world` is its module-scoped fixture
    CLI,
    World,
    _mkdir,
    _train,
    _write,
    copy_data,
    copy_run,
    recipe_in,
    shard0,
    world,
)
from test_olmo_bad_inputs_sweep import DEEP, PREP, _link

import olmo.cli.gate
import olmo.cli.main

__all__ = ["world"]


def _cache_is_a_file(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    mp.setenv("XDG_CACHE_HOME", str(_write(tmp / "cachefile", "x")))


def _home_is_a_file(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    mp.delenv("XDG_CACHE_HOME", raising=False)
    mp.setenv("HOME", str(_write(tmp / "homefile", "x")))


def _no_tmpdir(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    import tempfile

    mp.setenv("TMPDIR", str(tmp / "gone"))
    mp.setattr(tempfile, "tempdir", None)  # forget the cached answer so TMPDIR is read again


ENVS = [("cache-is-a-file", _cache_is_a_file), ("home-is-a-file", _home_is_a_file), ("tmpdir-missing", _no_tmpdir)]


@pytest.mark.parametrize(("env", "setup"), ENVS, ids=[e[0] for e in ENVS])
def test_odd_environments_keep_the_contract(env: str, setup: Any, world: World, cli: CLI, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An unusable cache or temp folder is no reason to fail: good input still works and bad input still gets
    its one line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    case = _mkdir(tmp_path / "case")
    setup(monkeypatch, tmp_path)
    code, _, err = cli("validate-shards", str(world.data))
    assert code == 0 and "Traceback" not in err, err
    code, _, err = cli(*_train(recipe_in(world, case, data__paths=[str(_write(shard0(copy_data(world, case)), b"")
                                                                       .parent)])))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(world: World, cli: CLI, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import safetensors.torch

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "model.safetensors"))

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    code, _, err = cli("export-hf", str(world.ckpt), str(tmp_path / "out"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no space left on " in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a partial export was left behind"


def _markup_dir(root: Path) -> Path:
    """A folder whose path reads as rich markup: `[/b]`, a closing tag nothing opened."""
    d = root / "a[" / "b]"
    d.mkdir(parents=True)
    return d


def test_paths_that_look_like_markup_are_printed_as_they_are(world: World, cli: CLI, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths are data: one that reads as console markup neither crashes a command nor loses characters."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    d = _markup_dir(tmp_path)
    docs = _write(d / "x.jsonl", '{"text": "hello there"}\nnot json\n{"text": ""}\n')
    code, out, err = cli("prepare-data", "-i", str(docs), "-o", str(tmp_path / "o"), *PREP, "--dry-run")
    assert code == 1 and "Traceback" not in err and "a[/b]" in out, err
    code, out, err = cli("prepare-data", "-i", str(docs), "-o", str(d / "o"), *PREP, "-q")
    assert code == 0 and "Traceback" not in err and f"{docs}: skipped 1 line" in err, err
    code, out, err = cli("validate-shards", str(d / "o"))
    assert code == 0 and "Traceback" not in err, err
    run = d / "run"
    code, out, err = cli(*_train(recipe_in(world, _mkdir(tmp_path / "case")), "--set", f"run_dir={run}",
                                 "--set", "steps=2", "--set", "save_interval=2"))
    assert code == 0 and "Traceback" not in err and f"saved {run}" in out, err


def test_a_path_that_is_not_utf8_is_named_exactly(cli: CLI, tmp_path: Path) -> None:
    """Its undecodable byte is shown as \\xNN (not dropped), so the one line still names the file."""
    code, _, err = cli("validate-shards", os.fsdecode(bytes(tmp_path) + b"/shards\xff"))
    assert code == 2 and err.strip() == f"olmo: {tmp_path}/shards\\xff is not a directory", err


def test_a_python_recipe_leaves_no_bytecode_beside_it(cli: CLI, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Even where Python writes bytecode (no PYTHONDONTWRITEBYTECODE), a failed run adds no __pycache__."""
    import sys

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    recipe = _write(tmp_path / "r.py", "def recipe():\n    return 1 / 0\n")
    code, _, err = cli("train", str(recipe), "--device", "cpu")
    assert code == 2 and "ZeroDivisionError" in err and sorted(p.name for p in tmp_path.iterdir()) == ["r.py"], err
    assert sys.dont_write_bytecode is False


def test_a_symlink_planted_at_a_temp_name_is_not_written_through(tmp_path: Path) -> None:
    """Crash-safe writes go through a temp name beside the target; a link planted at that name is replaced,
    and the file it points at (outside the folder) keeps its bytes."""
    from olmo.fsutil import atomic_write_bytes

    victim = _write(tmp_path / "victim.txt", "precious\n")
    out = _mkdir(tmp_path / "run")
    _link(out / f".train_state.json.tmp{os.getpid()}", victim)  # an older version's temp name
    atomic_write_bytes(out / "train_state.json", b"{}")
    assert victim.read_text() == "precious\n"
    assert (out / "train_state.json").read_bytes() == b"{}" and not (out / "train_state.json").is_symlink()
    # the planted link is not ours: left as it is (temp names are fresh, made with O_EXCL, never reused)
    assert sorted(p.name for p in out.iterdir()) == [f".train_state.json.tmp{os.getpid()}", "train_state.json"]


@pytest.mark.parametrize("tail", ['{"step": 3, "lo', "\x00\xff garbage", "[1, 2]", '{"step": "x"}', DEEP[:2000]])
def test_resume_after_a_torn_metrics_line_goes_on(tail: str, world: World, cli: CLI, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed mid-write leaves a torn last line in metrics.jsonl; --resume drops it and trains on."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    case = _mkdir(tmp_path / "case")
    run = copy_run(world, case)
    with open(run / "metrics.jsonl", "a", encoding="utf-8", errors="surrogateescape") as f:
        f.write(tail + "\n")
    code, _, err = cli(*_train(recipe_in(world, case), "--resume", "--set", "steps=3", "--set", "save_interval=3"))
    assert code == 0 and "Traceback" not in err, err
    assert tail not in (run / "metrics.jsonl").read_text(errors="replace")
