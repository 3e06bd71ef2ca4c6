"""The `olmo` error contract over a table of bad inputs: each one exits 2 (1 for damage validate-shards finds)
with exactly one line on stderr, no traceback, and no file created, changed or removed anywhere under the
test's folders (the tree is snapshotted before and after).

A good world is made once (shards, a trained checkpoint, its Hugging Face export, a recipe); each case builds
its own damaged copy in a fresh folder and runs the real entry point in-process.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import olmo.cli.gate
import olmo.cli.main
from olmo import checkpoint
from olmo.interop.hf import export_hf
from olmo.recipe import to_yaml
from olmo.train import train

CLI = Callable[..., tuple[int, str, str]]


@dataclass
class World:
    root: Path
    data: Path  # shards made by prepare-data (manifest + sidecars)
    run: Path  # a run_dir with one checkpoint
    ckpt: Path  # that checkpoint
    hf: Path  # its Hugging Face export
    recipe: Path  # trains on `data` into a fresh run_dir (under the case folder, see `recipe_in`)
    docs: Path  # a small .jsonl input


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path,
          micro: Callable[..., object]) -> Iterator[World]:
    root = tmp_path_factory.mktemp("world")
    data = root / "data"
    shutil.copytree(tiny_data, data)
    run = root / "run"
    cfg = micro(data, run, steps=2)
    cfg.eval_interval = 0  # type: ignore[attr-defined]
    train(cfg)  # type: ignore[arg-type]
    ckpt = checkpoint.latest(run)
    assert ckpt is not None
    hf = export_hf(ckpt, root / "hf")
    cfg.run_dir = "RUN_DIR"  # type: ignore[attr-defined]
    recipe = root / "recipe.yaml"
    recipe.write_text(to_yaml(cfg))  # type: ignore[arg-type]
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"document number {i} says hello"}) + "\n" for i in range(50)))
    yield World(root, data, run, ckpt, hf, recipe, docs)


def recipe_in(w: World, c: Path, **changes: object) -> str:
    """The world's recipe with run_dir under the case folder (and `changes` as top-level or dotted keys)."""
    import yaml

    raw = yaml.safe_load(w.recipe.read_text())
    raw["run_dir"] = str(c / "run")
    for key, value in changes.items():
        node = raw
        *sections, last = key.split("__")
        for s in sections:
            node = node[s]
        node[last] = value
    path = c / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def copy_data(w: World, c: Path) -> Path:
    out = c / "data"
    shutil.copytree(w.data, out)
    return out


def _copy_to(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def copy_run(w: World, c: Path) -> Path:
    out = c / "run"
    shutil.copytree(w.run, out)
    return out


def shard0(d: Path) -> Path:
    return d / "part-00000.npy"


def _flip_token(path: Path) -> None:
    arr = np.fromfile(path, dtype=np.uint16)
    arr[10] = arr[10] ^ 1
    arr.tofile(path)


def _bare(c: Path, arr: np.ndarray) -> Path:
    d = c / "bare"
    d.mkdir()
    arr.tofile(d / "tokens.npy")
    return d


def _manifest_edit(w: World, c: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    d = copy_data(w, c)
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def _truncate(path: Path, keep: int) -> Path:
    path.write_bytes(path.read_bytes()[:keep])
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _latest(run: Path) -> Path:
    ck = checkpoint.latest(run)
    assert ck is not None
    return ck


def _unlinked_shard(d: Path) -> Path:
    shard0(d).unlink()
    return d


def _truncated_shard(d: Path, keep: int) -> Path:
    _truncate(shard0(d), keep)
    return d


def _truncated_ckpt(run: Path, keep: int) -> Path:
    _truncate(_ckpt_file(run), keep)
    return run


def _flipped(d: Path) -> Path:
    _flip_token(shard0(d))
    return d


def _ckpt_file(run: Path) -> Path:
    ck = checkpoint.latest(run)
    assert ck is not None
    return next(p for p in ck.iterdir() if p.name.endswith(".distcp"))


def _hf_copy(w: World, c: Path) -> Path:
    out = c / "hf"
    shutil.copytree(w.hf, out)
    return out


def _hf_config(w: World, c: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    d = _hf_copy(w, c)
    conf = json.loads((d / "config.json").read_text())
    edit(conf)
    (d / "config.json").write_text(json.dumps(conf))
    return d


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    return path


def _train(*args: str) -> list[str]:
    return ["train", *args, "--device", "cpu"]


def _held(d: Path) -> Path:
    """`d` locked the way a running olmo locks it, by another open file of this process (flock treats each
    open file as its own owner), so the command under test must be refused."""
    d.mkdir(parents=True, exist_ok=True)
    (d / ".olmo.lock").write_text(json.dumps({"pid": 4242, "started": "2026-01-01 00:00:00 UTC"}))
    fd = os.open(d / ".olmo.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(fd)
    return d


_HELD: list[int] = []

Build = Callable[[World, Path], list[str]]
CASES: list[tuple[str, int, Build]] = [
    # ------------------------------------------------------------------ prepare-data
    ("prep-missing-input", 2, lambda w, c: ["prepare-data", "-i", str(c / "nope.jsonl"), "-o", str(c / "o"),
                                            "-t", "bundled"]),
    ("prep-unsupported-input", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.csv", "a,b\n")), "-o",
                                                str(c / "o"), "-t", "bundled"]),
    ("prep-gz-not-gzip", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.jsonl.gz", '{"text": "hi"}\n')),
                                          "-o", str(c / "o"), "-t", "bundled"]),
    ("prep-gz-truncated", 2, lambda w, c: ["prepare-data", "-i", str(_write(
        c / "x.jsonl.gz", gzip.compress(w.docs.read_bytes() * 40)[:300])), "-o", str(c / "o"), "-t", "bundled"]),
    ("prep-gz-truncated-existing-output", 2, lambda w, c: ["prepare-data", "-i", str(_write(
        c / "x.jsonl.gz", gzip.compress(w.docs.read_bytes() * 40)[:300])), "-o", str(_mkdir(c / "o")),
        "-t", "bundled"]),
    ("prep-missing-tokenizer", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                                str(c / "tok.json")]),
    ("prep-garbage-tokenizer", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                                str(_write(c / "tok.json", "{not json"))]),
    ("prep-binary-tokenizer", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                               str(_write(c / "tok.json", bytes(range(256)) * 4))]),
    ("prep-bad-shard-size", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                             "bundled", "--shard-size", "lots"]),
    ("prep-zero-shard-size", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                              "bundled", "--shard-size", "0"]),
    ("prep-zero-workers", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t", "bundled",
                                           "--workers", "0"]),
    ("prep-output-is-file", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(_write(c / "o", "x")),
                                             "-t", "bundled"]),
    ("prep-deep-new-output-bad-input", 2, lambda w, c: ["prepare-data", "-i", str(_write(
        c / "x.jsonl.gz", gzip.compress(w.docs.read_bytes() * 40)[:300])), "-o", str(c / "a" / "b" / "o"), "-t",
        "bundled"]),
    ("train-deep-new-run-dir-bad-data", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _truncated_shard(copy_data(w, c), 4000))]), "--set", f"run_dir={c / 'x' / 'y' / 'run'}")),
    ("prep-output-under-file", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o",
                                                str(_write(c / "f", "x") / "o"), "-t", "bundled"]),
    ("prep-other-job-output", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(copy_data(w, c)),
                                               "-t", "bundled"]),
    ("prep-output-in-use", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(_held(c / "o")), "-t",
                                            "bundled"]),
    ("prep-garbage-job-file", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(
        _write(copy_data(w, c) / "prepare.json", "\x00garbage").parent), "-t", "bundled"]),
    ("prep-unknown-eos", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t", "bundled",
                                          "--eos-token", "<nope>"]),
    ("prep-empty-dir", 2, lambda w, c: ["prepare-data", "-i", str(_mkdir(c / "in")), "-o",
                                        str(c / "o"), "-t", "bundled"]),
    ("prep-no-documents", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.jsonl", '{"t": 1}\nnope\n')),
                                           "-o", str(c / "o"), "-t", "bundled"]),
    # ------------------------------------------------------------------ validate-shards
    ("val-not-a-dir", 2, lambda w, c: ["validate-shards", str(_write(c / "f", "x"))]),
    ("val-no-metadata", 2, lambda w, c: ["validate-shards", str(_bare(c, np.arange(10, dtype=np.uint16)))]),
    ("val-garbage-manifest", 1, lambda w, c: ["validate-shards", str(_write(copy_data(w, c) / "manifest.json",
                                                                             "{garbage").parent)]),
    ("val-manifest-not-ours", 1, lambda w, c: ["validate-shards", str(_write(copy_data(w, c) / "manifest.json",
                                                                              '{"format": "x"}').parent)]),
    ("val-manifest-escaping-file", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(file="../../etc/passwd.npy")))]),
    ("val-manifest-bad-count", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(num_tokens="many")))]),
    ("val-manifest-entry-missing-key", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].pop("tokenizer_sha256")))]),
    ("val-manifest-missing-shard", 1, lambda w, c: ["validate-shards", str(
        _unlinked_shard(copy_data(w, c)))]),
    ("val-bad-dtype", 2, lambda w, c: ["validate-shards", str(w.data), "--dtype", "uint8"]),
    ("val-dtype-mismatch", 1, lambda w, c: ["validate-shards", str(w.data), "--dtype", "uint32"]),
    ("val-uint32-as-uint16", 1, lambda w, c: ["validate-shards", str(_bare(c, np.arange(1000, dtype=np.uint32))),
                                              "--vocab-size", "50000"]),
    ("val-truncated-shard", 1, lambda w, c: ["validate-shards", str(
        _truncated_shard(copy_data(w, c), 1001))]),
    ("val-zero-vocab", 2, lambda w, c: ["validate-shards", str(w.data), "--vocab-size", "0"]),
    # ------------------------------------------------------------------ train (fresh)
    ("train-missing-recipe", 2, lambda w, c: _train(str(c / "nope.yaml"))),
    ("train-binary-recipe", 2, lambda w, c: _train(str(_write(c / "r.yaml", bytes(range(256)))))),
    ("train-yaml-list", 2, lambda w, c: _train(str(_write(c / "r.yaml", "- 1\n- 2\n")))),
    ("train-broken-yaml", 2, lambda w, c: _train(str(_write(c / "r.yaml", "model: {d_model: [\n")))),
    ("train-py-syntax-error", 2, lambda w, c: _train(str(_write(c / "r.py", "def recipe(:\n")))),
    ("train-py-raises", 2, lambda w, c: _train(str(_write(c / "r.py", "def recipe():\n    return 1 / 0\n")))),
    ("train-py-null-bytes", 2, lambda w, c: _train(str(_write(c / "r.py", b"x = 1\x00\n")))),
    ("train-lr-nan", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.lr=nan")),
    ("train-lr-negative", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.lr=-1e-3")),
    ("train-wd-inf", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.weight_decay=.inf")),
    ("train-clip-nan", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.grad_clip=.nan")),
    ("train-beta-nan", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.betas=[0.9,nan]")),
    ("train-eps-negative", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.eps=-1")),
    ("train-warmup-negative", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.warmup_steps=-5")),
    ("train-unknown-key", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.learning_rate=1")),
    ("train-wrong-type", 2, lambda w, c: _train(recipe_in(w, c), "--set", "data.seq_len=long")),
    ("train-missing-data", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(c / "gone")]))),
    ("train-garbage-manifest", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _write(copy_data(w, c) / "manifest.json", "[1, 2").parent)]))),
    ("train-truncated-shard", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _truncated_shard(copy_data(w, c), 4000))]))),
    ("train-changed-shard", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _flipped(copy_data(w, c)))]))),
    ("train-bare-without-dtype", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _bare(c, np.arange(5000, dtype=np.uint16) % 700))]))),
    ("train-bare-out-of-vocab", 2, lambda w, c: _train(recipe_in(w, c, data__dtype="uint16", data__vocab_size=766,
                                                                 data__paths=[str(_bare(c, np.arange(
                                                                     5000, dtype=np.uint16) % 800))]))),
    ("train-dtype-uint8", 2, lambda w, c: _train(recipe_in(w, c, data__dtype="uint8"))),
    ("train-dtype-mismatch", 2, lambda w, c: _train(recipe_in(w, c, data__dtype="uint32"))),
    ("train-run-dir-is-file", 2, lambda w, c: _train(recipe_in(w, c), "--set", f"run_dir={_write(c / 'f', 'x')}")),
    ("train-run-dir-under-file", 2, lambda w, c: _train(recipe_in(w, c), "--set",
                                                        f"run_dir={_write(c / 'f', 'x') / 'run'}")),
    ("train-existing-checkpoints", 2, lambda w, c: (copy_run(w, c), _train(recipe_in(w, c)))[1]),
    ("train-init-from-missing", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(c / "nope"))),
    ("train-bad-device", 2, lambda w, c: [*_train(recipe_in(w, c))[:-2], "--device", "tpu"]),
    ("train-bad-precision", 2, lambda w, c: _train(recipe_in(w, c), "--set", "precision=fp4")),
    ("train-fp8-fused-projections", 2, lambda w, c: _train(recipe_in(w, c, precision="fp8",
                                                                      model__fuse_projections=True))),
    ("train-init-from-truncated", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(
        _truncated_ckpt(_copy_to(w.run, c / "src"), 10)))),
    ("train-init-from-garbage-metadata", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(
        _same_size_garbage(_latest(_copy_to(w.run, c / "src")) / ".metadata").parent))),
    ("train-val-paths-truncated", 2, lambda w, c: _train(recipe_in(w, c, data__val_paths=[str(
        _truncated_shard(copy_data(w, c), 4000))]))),
    # ------------------------------------------------------------------ train --resume
    ("resume-truncated-checkpoint", 2, lambda w, c: (_truncate(_ckpt_file(copy_run(w, c)), 100),
                                                     _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-garbage-train-state", 2, lambda w, c: (_write(_latest(copy_run(w, c)) / "train_state.json",
                                                           "\x00\x01garbage"), _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-train-state-list", 2, lambda w, c: (_write(_latest(copy_run(w, c)) / "train_state.json",
                                                        "[1, 2, 3]"), _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-train-state-no-position", 2, lambda w, c: (_edit_state(copy_run(w, c), "data_loader"),
                                                        _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-garbage-rng", 2, lambda w, c: (_edit_state(copy_run(w, c), "rng_ranks", [{"torch": "x"}]),
                                            _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-bad-loader-position", 2, lambda w, c: (_edit_state(copy_run(w, c), "data_loader", {"seed": "x"}),
                                                    _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-garbage-metadata", 2, lambda w, c: (_same_size_garbage(_latest(copy_run(w, c)) / ".metadata"),
                                                 _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-run-dir-in-use", 2, lambda w, c: (_held(copy_run(w, c)), _train(recipe_in(w, c), "--resume"))[1]),
    # ------------------------------------------------------------------ export-hf
    ("export-missing-checkpoint", 2, lambda w, c: ["export-hf", str(c / "nope"), str(c / "out")]),
    ("export-truncated-checkpoint", 2, lambda w, c: ["export-hf", str(
        _truncated_ckpt(copy_run(w, c), 10)), str(c / "out")]),
    ("export-garbage-train-state", 2, lambda w, c: ["export-hf", str(_write(
        _latest(copy_run(w, c)) / "train_state.json", "{{{").parent), str(c / "out")]),
    ("export-garbage-metadata", 2, lambda w, c: ["export-hf", str(_same_size_garbage(
        _latest(copy_run(w, c)) / ".metadata").parent), str(c / "out")]),
    ("export-output-exists", 2, lambda w, c: ["export-hf", str(w.ckpt), str(_mkdir(c / "out"))]),
    ("export-output-is-not-ours", 2, lambda w, c: ["export-hf", str(w.ckpt), str(_write(_mkdir(c / "out") / "a",
                                                                                        "x").parent), "--overwrite"]),
    ("export-output-under-file", 2, lambda w, c: ["export-hf", str(w.ckpt), str(_write(c / "f", "x") / "out")]),
    ("export-bad-dtype", 2, lambda w, c: ["export-hf", str(w.ckpt), str(c / "out"), "--dtype", "int8"]),
    ("export-garbage-tokenizer", 2, lambda w, c: ["export-hf", str(w.ckpt), str(c / "out"), "--tokenizer",
                                                  str(_write(c / "tok.json", "nope"))]),
    # ------------------------------------------------------------------ import-hf
    ("import-missing-dir", 2, lambda w, c: ["import-hf", str(c / "nope"), str(c / "out")]),
    ("import-no-config", 2, lambda w, c: ["import-hf", str(_mkdir(c / "hf")), str(c / "out")]),
    ("import-garbage-config", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "config.json",
                                                                        "{oops").parent), str(c / "out")]),
    ("import-binary-config", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "config.json",
                                                                       bytes(range(256))).parent), str(c / "out")]),
    ("import-config-missing-key", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.pop("hidden_size"))), str(c / "out")]),
    ("import-config-wrong-type", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_attention_heads="four"))), str(c / "out")]),
    ("import-config-negative", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_hidden_layers=-2))), str(c / "out")]),
    ("import-config-a-billion-layers", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_hidden_layers=10**9, model_type="olmo3"))), str(c / "out")]),
    ("import-config-layers-as-text", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_hidden_layers="../x"))), str(c / "out")]),
    ("import-config-rope-scaling-number", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(rope_scaling=1.5))), str(c / "out")]),
    ("train-a-billion-layers", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.n_layers=1000000000")),
    ("import-config-llama", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(model_type="llama"))), str(c / "out")]),
    ("import-garbage-weights", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "model.safetensors",
                                                                         b"\x08" + b"\x00" * 7 + b"{junk").parent),
                                                str(c / "out")]),
    ("import-truncated-weights", 2, lambda w, c: ["import-hf", str(
        _truncate(_hf_copy(w, c) / "model.safetensors", 500).parent), str(c / "out")]),
    ("import-index-escapes", 2, lambda w, c: ["import-hf", str(_write(
        _hf_copy(w, c) / "model.safetensors.index.json", json.dumps({"weight_map": {"a": "../../x.safetensors"}})
    ).parent), str(c / "out")]),
    ("import-garbage-index", 2, lambda w, c: ["import-hf", str(_write(
        _hf_copy(w, c) / "model.safetensors.index.json", "[]").parent), str(c / "out")]),
    ("import-output-exists", 2, lambda w, c: ["import-hf", str(w.hf), str(_mkdir(c / "out"))]),
    ("import-output-is-not-ours", 2, lambda w, c: ["import-hf", str(w.hf), str(_write(_mkdir(c / "out") / "a",
                                                                                     "x").parent), "--overwrite"]),
    ("import-output-is-file", 2, lambda w, c: ["import-hf", str(w.hf), str(_write(c / "out", "x"))]),
    # ------------------------------------------------------------------ the command line itself
    ("cli-unknown-command", 2, lambda w, c: ["fly"]),
    ("cli-unknown-option", 2, lambda w, c: ["train", "--fast"]),
    ("cli-smoke-with-recipe", 2, lambda w, c: ["train", "--smoke", str(w.recipe)]),
    ("cli-no-recipe", 2, lambda w, c: ["train"]),
]


def _edit_state(run: Path, key: str, value: object = None) -> Path:
    """Drop `key` from the latest checkpoint's train_state.json, or set it to `value`."""
    ck = checkpoint.latest(run)
    assert ck is not None
    state = json.loads((ck / "train_state.json").read_text())
    if value is None:
        state.pop(key)
    else:
        state[key] = value
    # keep the recorded sizes true, so only the missing key is wrong
    (ck / "train_state.json").write_text(json.dumps(state))
    return run


def _same_size_garbage(path: Path) -> Path:
    path.write_bytes(bytes(i % 251 for i in range(path.stat().st_size)))
    return path


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every folder under `roots`, and every file with its size and mtime: a file created, written or removed
    shows up as a difference (a folder's own mtime does not count: a lock file comes and goes)."""
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            out.update({os.path.join(dirpath, d): (0, 0) for d in dirnames})
            for name in filenames:
                st = os.lstat(os.path.join(dirpath, name))
                out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime_ns)
    return out


def test_the_table_is_large_and_distinct() -> None:
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


def run_bad_input(name: str, code: int, build: Build, world: World, cli: CLI, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], str]:
    """Run one table case and check the contract: exit `code`, one `olmo: ` line on stderr, no traceback, no file
    created or changed, no default run_dir. Returns the command's arguments and its stdout for extra checks."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)  # the gate is tested elsewhere; no probes here
    case = tmp_path / "case"
    case.mkdir()
    args = build(world, case)
    before = snapshot(world.root, case)
    try:
        got, out, err = cli(*args)
    finally:
        while _HELD:
            os.close(_HELD.pop())
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert got == code, f"{name}: exit {got}, stderr:\n{err}"
    assert len(lines) == 1 and lines[0].startswith("olmo: "), f"{name}: stderr:\n{err}"
    assert "Traceback" not in err + out
    assert snapshot(world.root, case) == before, f"{name}: files changed"
    assert not (tmp_path / "runs").exists(), f"{name}: a default run_dir appeared"
    return args, out


@pytest.mark.parametrize(("name", "code", "build"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(name: str, code: int, build: Build, world: World, cli: CLI,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_bad_input(name, code, build, world, cli, tmp_path, monkeypatch)


def test_a_bug_keeps_its_traceback_and_asks_to_be_reported(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo.data.prepare

    def broken(*a: object, **k: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(olmo.data.prepare, "find_inputs", broken)
    code, _, err = cli("prepare-data", "-i", "x.jsonl", "-o", "out", "-t", "bundled")
    assert code == 1 and "Traceback" in err and "ZeroDivisionError: a bug" in err
    assert err.strip().splitlines()[-1].startswith("olmo: this is a bug in olmo; please report it")


def test_an_os_error_from_the_environment_is_one_line(tmp_path: Path, cli: CLI,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import olmo.data.prepare

    def read_only(path: Path, obj: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(olmo.data.prepare, "atomic_write_json", read_only)
    docs = _write(tmp_path / "d.jsonl", '{"text": "hello world"}\n')
    code, _, err = cli("prepare-data", "-i", str(docs), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 2 and err.strip() == f"olmo: {tmp_path / 'o' / 'prepare.json'}: Read-only file system"
    assert not (tmp_path / "o").exists()
