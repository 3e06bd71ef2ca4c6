"""Data checked before step 1: an out-of-vocab id in 100 MB of shards fails in under 2 s without building a
model, a second start reads nothing (the scan is cached), and headerless shards need their dtype."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import olmo.cli.gate
import olmo.cli.main
from olmo import parallel
from olmo.config import TrainConfig
from olmo.data import shard_check
from olmo.data.shards import FORMAT, VERSION
from olmo.recipe import to_yaml

CLI = Callable[..., tuple[int, str, str]]
TOKENS = 25_000_000  # per shard: two uint16 shards are 100 MB


def _shards(d: Path, bad_at: int | None = None) -> Path:
    """Two 50 MB uint16 shards with a manifest as prepare-data writes it, whose sha256 fits the bytes; with
    `bad_at`, shard 2 holds id 5000 there while its metadata claims every id is below 700 (a tool that
    recorded the wrong max, or a model whose vocab is smaller than the data's)."""
    d.mkdir()
    rng = np.random.default_rng(0)
    entries = []
    for i in range(2):
        arr = rng.integers(0, 700, TOKENS, dtype=np.uint16)
        if bad_at is not None and i == 1:
            arr[bad_at] = 5000
        name = f"part-{i:05d}.npy"
        arr.tofile(d / name)
        entries.append({"file": name, "num_tokens": TOKENS, "num_docs": 1, "dtype": "uint16", "vocab_size": 766,
                        "eos_id": 0, "tokenizer_sha256": "t", "sha256": hashlib.sha256(arr.data).hexdigest(),
                        "max_id": 699, "block_crc32": []})
    manifest = {"format": FORMAT, "version": VERSION, "dtype": "uint16", "vocab_size": 766, "eos_id": 0,
                "tokenizer": {"path": "tok.json", "sha256": "t"}, "shards": entries}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def _recipe(tmp: Path, micro: Callable[..., TrainConfig], data: Path, **data_fields: object) -> str:
    cfg = micro(data, tmp / "run")
    for k, v in data_fields.items():
        setattr(cfg.data, k, v)
    path = tmp / "recipe.yaml"
    path.write_text(to_yaml(cfg))
    return str(path)


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if training gets as far as building a model, or reaches the doctor."""
    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("got past the data checks")

    monkeypatch.setattr(parallel, "build_parallel_model", refuse)
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", refuse)


def test_out_of_vocab_id_in_100mb_fails_before_step_1(tmp_path: Path, cli: CLI, micro: Callable[..., TrainConfig],
                                                      monkeypatch: pytest.MonkeyPatch, no_model: None) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = _shards(tmp_path / "data", bad_at=TOKENS - 7)
    recipe = _recipe(tmp_path, micro, data)
    code, _, err = cli("train", recipe, "--device", "cpu")  # `no_model`: it stops before a model is built
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"part-00001.npy holds token id 5,000 (first out-of-range id at token {TOKENS - 7:,})" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_second_start_reads_nothing_and_changed_bytes_are_caught(tmp_path: Path, micro: Callable[..., TrainConfig],
                                                                 monkeypatch: pytest.MonkeyPatch, cli: CLI,
                                                                 no_model: None) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = _shards(tmp_path / "data")
    cfg = micro(data, tmp_path / "run")
    from olmo.preflight import build_data

    world = parallel.world_from_env()
    build_data(cfg, world)  # scans and caches
    assert shard_check.cache_path().is_file()
    shard_check._memo.clear()  # a new process: only the file cache is left

    def no_scan(*a: object) -> None:
        raise AssertionError("scanned again")

    monkeypatch.setattr(shard_check, "scan", no_scan)
    build_data(cfg, world)  # `no_scan` fails the test if a byte of the shards is scanned again
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", no_scan)
    shard_check._memo.clear()
    with open(data / "part-00000.npy", "r+b") as f:  # one byte changes: same size, new mtime
        f.seek(1000)
        f.write(b"\x01")
    code, _, err = cli("train", _recipe(tmp_path, micro, data), "--device", "cpu")
    assert code == 2 and "part-00000.npy does not match the sha256 its metadata records" in err


def test_truncated_shard_with_metadata_is_refused_before_training(tmp_path: Path, cli: CLI, no_model: None,
                                                                  micro: Callable[..., TrainConfig],
                                                                  tiny_data: Path) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    shard = data / "part-00001.npy"
    shard.write_bytes(shard.read_bytes()[:5000])
    code, _, err = cli("train", _recipe(tmp_path, micro, data), "--device", "cpu")
    assert code == 2 and "part-00001.npy has 5,000 bytes but its metadata says" in err, err


def test_headerless_shards_need_a_dtype_and_uint32_read_as_uint16_is_caught(
        tmp_path: Path, cli: CLI, micro: Callable[..., TrainConfig], no_model: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bare = tmp_path / "bare"
    bare.mkdir()
    (np.arange(20_000, dtype=np.uint32) % 700).tofile(bare / "tokens.npy")
    code, _, err = cli("train", _recipe(tmp_path, micro, bare, vocab_size=766), "--device", "cpu")
    assert code == 2 and "set data.dtype" in err
    code, _, err = cli("train", _recipe(tmp_path, micro, bare, vocab_size=766, dtype="uint16"), "--device", "cpu")
    assert code == 2 and "looks like uint32 data; set data.dtype=uint32" in err, err
    # validate-shards sees the same: twice the tokens, every second one 0
    code, _, err = cli("validate-shards", str(bare), "--vocab-size", "766")
    assert code == 1 and "looks like uint32 data; pass --dtype uint32" in err
    code, out, _ = cli("validate-shards", str(bare), "--vocab-size", "766", "--dtype", "uint32")
    assert code == 0 and "20,000 tokens" in out


def test_validate_shards_checks_the_manifest_and_dtype(tiny_data: Path, tmp_path: Path, cli: CLI) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    code, _, err = cli("validate-shards", str(data), "--dtype", "uint32")
    assert code == 1 and "the metadata says uint16 but --dtype is uint32" in err
    m = json.loads((data / "manifest.json").read_text())
    m["shards"][1]["file"] = "../outside.npy"
    (data / "manifest.json").write_text(json.dumps(m))
    code, _, err = cli("validate-shards", str(data))
    assert code == 1 and "shard entry 1 names no shard file in this folder" in err
    (data / "manifest.json").write_text('{"format": "olmo-token-shards", "shards": "all"}')
    code, _, err = cli("validate-shards", str(data))
    assert code == 1 and err.startswith("olmo: corrupt: ") and len(err.strip().splitlines()) == 1
