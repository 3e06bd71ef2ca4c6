"""More of the `olmo` error contract: a second table of bad inputs, hostile recipes (YAML bombs, recursive
aliases, Python recipes that exit), odd paths (FIFOs, devices, newlines, undecodable bytes), damaged manifests,
sidecars, checkpoints and Hugging Face folders, and every override spelling. Each case must exit 2 (1 for damage
validate-shards finds) with one line on stderr, no traceback, and no file created, changed or removed.

The good world (shards, a checkpoint, its export, a recipe) and the checks are those of test_olmo_bad_inputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_olmo_bad_inputs import (  # the same world and helpers; `world` is its module-scoped fixture
    CLI,
    Build,
    World,
    _bare,
    _ckpt_file,
    _hf_config,
    _hf_copy,
    _latest,
    _manifest_edit,
    _mkdir,
    _train,
    _write,
    copy_data,
    copy_run,
    recipe_in,
    run_bad_input,
    shard0,
    world,
)

__all__ = ["world"]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _link(path: Path, target: str | Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)
    return path


def _state(w: World, c: Path, edit: dict[str, Any]) -> Path:
    run = copy_run(w, c)
    st = _latest(run) / "train_state.json"
    state = json.loads(st.read_text())
    state.update(edit)
    st.write_text(json.dumps(state))
    return run


def _model_edit(w: World, c: Path, **changes: object) -> Path:
    """A copy of the world's run whose checkpoint records a model config with `changes`."""
    run = copy_run(w, c)
    st = _latest(run) / "train_state.json"
    state = json.loads(st.read_text())
    state["config"]["model"].update(changes)
    st.write_text(json.dumps(state))
    return run


def _victim(c: Path) -> Path:
    """A file outside the output folder that a lock written through a symlink would overwrite."""
    return _write(c / "victim.txt", "precious\n")


def _planted(c: Path, name: str) -> Path:
    """An output folder holding a `.olmo.lock` symlink to the victim."""
    d = _mkdir(c / name)
    _link(d / ".olmo.lock", _victim(c))
    return d


def _sidecar(d: Path, text: str) -> Path:
    next(iter(sorted(d.glob("part-*.json")))).write_text(text)
    return d


def _yaml(c: Path, text: str | bytes, name: str = "r.yaml") -> str:
    return str(_write(c / name, text))


def _recipe_text(w: World, c: Path) -> str:
    """The world's recipe as text, with run_dir under the case folder."""
    return Path(recipe_in(w, c)).read_text()


DEEP = "[" * 50_000 + "]" * 50_000
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))
PREP = ["-t", "bundled"]

CASES: list[tuple[str, int, Build]] = [
    # ------------------------------------------------------------------ prepare-data: odd inputs
    ("prep-input-fifo", 2, lambda w, c: ["prepare-data", "-i", str(_fifo(c / "f.jsonl")), "-o", str(c / "o"), *PREP]),
    ("prep-input-dev-zero", 2, lambda w, c: ["prepare-data", "-i", "/dev/zero", "-o", str(c / "o"), *PREP]),
    ("prep-input-symlink-loop", 2, lambda w, c: ["prepare-data", "-i", str(_link(c / "x.jsonl", c / "x.jsonl")),
                                                 "-o", str(c / "o"), *PREP]),
    ("prep-input-newline-name", 2, lambda w, c: ["prepare-data", "-i", str(c / "a\nb.jsonl"), "-o", str(c / "o"),
                                                 *PREP]),
    ("prep-input-undecodable-name", 2, lambda w, c: ["prepare-data", "-i", os.fsdecode(bytes(c) + b"/\xff\xfe.jsonl"),
                                                     "-o", str(c / "o"), *PREP]),
    ("prep-input-not-utf8", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.jsonl", b"\xff\xfe\x00" * 50)),
                                             "-o", str(c / "o"), *PREP]),
    ("prep-input-empty-gz", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.jsonl.gz", b"")), "-o",
                                             str(c / "o"), *PREP]),
    ("prep-input-txt-gz-garbage", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.txt.gz", b"\x1f\x8bjunk")),
                                                   "-o", str(c / "o"), *PREP]),
    ("prep-input-text-not-string", 2, lambda w, c: ["prepare-data", "-i", str(_write(
        c / "x.jsonl", '{"text": 5}\n{"text": null}\n{"text": ["a"]}\n')), "-o", str(c / "o"), *PREP]),
    ("prep-input-deep-json", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.jsonl", DEEP + "\n")), "-o",
                                              str(c / "o"), *PREP]),
    ("prep-input-only-subdir", 2, lambda w, c: ["prepare-data", "-i", str(_mkdir(_mkdir(c / "in") / "sub").parent),
                                                "-o", str(c / "o"), *PREP]),
    ("prep-input-is-output", 2, lambda w, c: ["prepare-data", "-i", str(copy_data(w, c)), "-o", str(c / "data"),
                                              *PREP]),
    ("prep-tokenizer-dir", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                            str(_mkdir(c / "tok"))]),
    ("prep-tokenizer-dev-null", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                                 "/dev/null"]),
    ("prep-tokenizer-fifo", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                             str(_fifo(c / "tok.json"))]),
    ("prep-tokenizer-empty-object", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                                     str(_write(c / "tok.json", "{}"))]),
    ("prep-tokenizer-list", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                             str(_write(c / "tok.json", "[1, 2]"))]),
    ("prep-tokenizer-deep", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), "-t",
                                             str(_write(c / "tok.json", DEEP))]),
    ("prep-shard-size-negative", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                                  "--shard-size", "-5M"]),
    ("prep-shard-size-inf", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                             "--shard-size", "inf"]),
    ("prep-shard-size-nan", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                             "--shard-size", "nan"]),
    ("prep-shard-size-huge", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                              "--shard-size", "1e999"]),
    ("prep-shard-size-empty", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                               "--shard-size", ""]),
    ("prep-shard-size-suffix-only", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                                     "--shard-size", "M"]),
    ("prep-workers-negative", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                               "--workers", "-1"]),
    ("prep-output-dev-null", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", "/dev/null", *PREP]),
    ("prep-output-fifo", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(_fifo(c / "o")), *PREP]),
    ("prep-eos-empty", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(c / "o"), *PREP,
                                        "--eos-token", ""]),
    ("prep-dry-run-bad-input", 2, lambda w, c: ["prepare-data", "-i", str(_write(c / "x.jsonl.gz", "nope")), "-o",
                                                str(c / "o"), *PREP, "--dry-run"]),
    # ------------------------------------------------------------------ validate-shards
    ("val-dir-is-fifo", 2, lambda w, c: ["validate-shards", str(_fifo(c / "d"))]),
    ("val-manifest-is-dir", 1, lambda w, c: ["validate-shards", str(_mkdir(_unlink(copy_data(w, c) / "manifest.json"))
                                                                     .parent)]),
    ("val-manifest-deep", 1, lambda w, c: ["validate-shards", str(_write(copy_data(w, c) / "manifest.json",
                                                                          DEEP).parent)]),
    ("val-manifest-not-utf8", 1, lambda w, c: ["validate-shards", str(_write(copy_data(w, c) / "manifest.json",
                                                                              b"\xff\xfe{}").parent)]),
    ("val-manifest-empty", 1, lambda w, c: ["validate-shards", str(_write(copy_data(w, c) / "manifest.json",
                                                                           "").parent)]),
    ("val-manifest-shards-null", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m.update(shards=None)))]),
    ("val-manifest-shards-dict", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m.update(shards={"a": 1})))]),
    ("val-manifest-shard-entry-string", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"].__setitem__(0, "part-00000.npy")))]),
    ("val-manifest-tokens-huge", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(num_tokens=10**30)))]),
    ("val-manifest-tokens-negative", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(num_tokens=-3)))]),
    ("val-manifest-tokens-float", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(num_tokens=1.5)))]),
    ("val-manifest-dtype-object", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: [s.update(dtype="object") for s in m["shards"]]))]),
    ("val-manifest-vocab-zero", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: [s.update(vocab_size=0) for s in m["shards"]]))]),
    ("val-manifest-file-absolute", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(file="/dev/zero")))]),
    ("val-manifest-file-null", 1, lambda w, c: ["validate-shards", str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(file=None)))]),
    ("val-shard-symlink-out", 1, lambda w, c: ["validate-shards", str(_link(shard0(copy_data(w, c)),
                                                                            "/dev/zero").parent)]),
    ("val-shard-is-dir", 1, lambda w, c: ["validate-shards", str(_mkdir(_unlink(shard0(copy_data(w, c)))).parent)]),
    ("val-shard-empty", 1, lambda w, c: ["validate-shards", str(_write(shard0(copy_data(w, c)), b"").parent)]),
    ("val-shard-fifo", 1, lambda w, c: ["validate-shards", str(_fifo(_unlink(shard0(copy_data(w, c)))).parent)]),
    ("val-sidecar-garbage", 1, lambda w, c: ["validate-shards", str(_sidecar(_no_manifest(copy_data(w, c)), "{x"))]),
    ("val-sidecar-list", 1, lambda w, c: ["validate-shards", str(_sidecar(_no_manifest(copy_data(w, c)), "[]"))]),
    ("val-bare-odd-bytes", 1, lambda w, c: ["validate-shards", str(_write(_mkdir(c / "bare") / "t.npy", b"\x01" * 1001)
                                                                   .parent), "--vocab-size", "500"]),
    ("val-bare-out-of-vocab", 1, lambda w, c: ["validate-shards", str(_bare(c, np.arange(1000, dtype=np.uint16))),
                                               "--vocab-size", "10"]),
    ("val-dtype-upper", 2, lambda w, c: ["validate-shards", str(w.data), "--dtype", "UINT64"]),
    ("val-vocab-negative", 2, lambda w, c: ["validate-shards", str(w.data), "--vocab-size", "-4"]),
    ("val-vocab-too-big-for-dtype", 2, lambda w, c: ["validate-shards", str(_bare(c, np.arange(9, dtype=np.uint16))),
                                                     "--vocab-size", "100000", "--dtype", "uint16"]),
    # ------------------------------------------------------------------ train: hostile recipes
    ("train-yaml-deep", 2, lambda w, c: _train(_yaml(c, "model: " + DEEP))),
    ("train-yaml-bomb", 2, lambda w, c: _train(_yaml(c, BOMB))),
    ("train-yaml-recursive-alias", 2, lambda w, c: _train(_yaml(c, "model: &a {size: olmo2_60m, x: *a}\n"))),
    ("train-yaml-recursive-list", 2, lambda w, c: _train(_yaml(c, "data: {paths: &p [*p]}\n"))),
    ("train-yaml-python-tag", 2, lambda w, c: _train(_yaml(c, f"steps: !!python/object/apply:os.system "
                                                              f"['touch {c}/pwned']\n"))),
    ("train-yaml-huge-int", 2, lambda w, c: _train(recipe_in(w, c, steps=10**100))),
    ("train-yaml-steps-inf", 2, lambda w, c: _train(recipe_in(w, c), "--set", "steps=.inf")),
    ("train-yaml-bool-as-int", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.d_model=true")),
    ("train-yaml-unknown-size", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model=olmo9_zillion")),
    ("train-yaml-section-scalar", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim=5")),
    ("train-yaml-section-list", 2, lambda w, c: _train(recipe_in(w, c), "--set", "data=[1, 2]")),
    ("train-yaml-paths-string", 2, lambda w, c: _train(recipe_in(w, c), "--set", "data.paths=7")),
    ("train-yaml-paths-null-item", 2, lambda w, c: _train(recipe_in(w, c), "--set", "data.paths=[null]")),
    ("train-yaml-paths-empty", 2, lambda w, c: _train(recipe_in(w, c), "--set", "data.paths=[]")),
    ("train-yaml-empty-file", 2, lambda w, c: _train(_yaml(c, ""), "--set", f"run_dir={c / 'run'}")),
    ("train-yaml-unicode-key", 2, lambda w, c: _train(_yaml(c, "möde\u200bl: {}\n"))),
    ("train-yaml-timestamp", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.lr=2001-12-14")),
    ("train-yaml-utf16", 2, lambda w, c: _train(_yaml(c, "steps: 3\n".encode("utf-16")))),
    ("train-yaml-duplicate-key", 2, lambda w, c: _train(_yaml(c, _recipe_text(w, c) + "steps: 99999\n"))),
    ("train-yaml-duplicate-nested-key", 2, lambda w, c: _train(_yaml(c, "optim: {lr: 0.1, lr: 0.2}\n"))),
    ("train-recipe-is-dir", 2, lambda w, c: _train(str(_mkdir(c / "r.yaml")))),
    ("train-recipe-fifo", 2, lambda w, c: _train(str(_fifo(c / "r.yaml")))),
    ("train-recipe-newline-name", 2, lambda w, c: _train(str(c / "r\nx.yaml"))),
    ("train-py-sys-exit", 2, lambda w, c: _train(_yaml(c, "import sys\nsys.exit(0)\n", "r.py"))),
    ("train-py-fn-sys-exit", 2, lambda w, c: _train(_yaml(c, "def recipe():\n    raise SystemExit(0)\n", "r.py"))),
    ("train-py-recursion", 2, lambda w, c: _train(_yaml(c, "def recipe():\n    return recipe()\n", "r.py"))),
    ("train-py-no-function", 2, lambda w, c: _train(_yaml(c, "x = 1\n", "r.py") + ":nope")),
    ("train-py-returns-nan", 2, lambda w, c: _train(_yaml(
        c, "from olmo.config import TrainConfig\ndef recipe():\n    c = TrainConfig()\n    c.optim.lr = "
           "float('nan')\n    return c\n", "r.py"))),
    ("train-py-not-utf8", 2, lambda w, c: _train(_yaml(c, b"x = '\xff\xfe'\n", "r.py"))),
    # ------------------------------------------------------------------ train: override spellings
    ("train-set-no-equals", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.lr")),
    ("train-set-empty-key", 2, lambda w, c: _train(recipe_in(w, c), "--set", "=3")),
    ("train-set-double-dot", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim..lr=3")),
    ("train-set-broken-yaml", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.lr=[[[")),
    ("train-set-python-tag", 2, lambda w, c: _train(recipe_in(w, c), "--set",
                                                    f"steps=!!python/object/apply:os.system ['touch {c}/pwned']")),
    ("train-set-float-layers", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.n_layers=2.5")),
    ("train-set-lr-huge", 2, lambda w, c: _train(recipe_in(w, c), "--set", "optim.lr=1e999")),
    ("train-set-zero-seq", 2, lambda w, c: _train(recipe_in(w, c), "--set", "data.seq_len=0")),
    ("train-set-batch-not-divisible", 2, lambda w, c: _train(recipe_in(w, c), "--set", "micro_batch_size=3")),
    ("train-set-zero-batch", 2, lambda w, c: _train(recipe_in(w, c), "--set", "global_batch_size=0")),
    ("train-set-vocab-negative", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.vocab_size=-1")),
    ("train-set-heads-not-dividing", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.n_heads=3")),
    ("train-set-into-scalar", 2, lambda w, c: _train(recipe_in(w, c), "--set", "steps.x=1")),
    ("train-olmocore-nan", 2, lambda w, c: _train(recipe_in(w, c), "--optim.lr=nan")),
    ("train-olmocore-bare-flag", 2, lambda w, c: _train(recipe_in(w, c), "--optim.lr")),
    ("train-torchtitan-negative", 2, lambda w, c: _train(recipe_in(w, c), "--optim.lr", "-3")),
    ("train-olmocore-unknown", 2, lambda w, c: _train(recipe_in(w, c), "--model.nlayers=3")),
    ("train-olmocore-newline", 2, lambda w, c: _train(recipe_in(w, c), "--optim.lr=1\nrm -rf /")),
    ("train-json-bad-number", 2, lambda w, c: [*_train(recipe_in(w, c), "--set", "optim.lr=-1"), "--json"]),
    ("train-dry-run-bad", 2, lambda w, c: [*_train(recipe_in(w, c), "--set", "optim.lr=inf"), "--dry-run"]),
    ("smoke-lr-nan", 2, lambda w, c: ["train", "--smoke", "--device", "cpu", "--set", "optim.lr=nan"]),
    ("smoke-olmocore-unknown", 2, lambda w, c: ["train", "--smoke", "--device", "cpu", "--model.bogus=1"]),
    ("smoke-too-few-steps", 2, lambda w, c: ["train", "--smoke", "--device", "cpu", "--steps", "2"]),
    ("smoke-keep-under-file", 2, lambda w, c: ["train", "--smoke", "--device", "cpu", "--keep",
                                               str(_write(c / "f", "x") / "k")]),
    ("smoke-json-bad-set", 2, lambda w, c: ["train", "--smoke", "--device", "cpu", "--json", "--set", "x=1"]),
    # ------------------------------------------------------------------ train: data and run_dir
    ("train-data-is-dev-zero", 2, lambda w, c: _train(recipe_in(w, c, data__paths=["/dev/zero"]))),
    ("train-data-fifo", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(_fifo(c / "d.npy"))]))),
    ("train-data-manifest-deep", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _write(copy_data(w, c) / "manifest.json", DEEP).parent)]))),
    ("train-data-shard-symlink-out", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _link(shard0(copy_data(w, c)), "/dev/zero").parent)]))),
    ("train-data-shard-empty", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _write(shard0(copy_data(w, c)), b"").parent)]))),
    ("train-data-manifest-tokens-huge", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(_manifest_edit(
        w, c, lambda m: m["shards"][0].update(num_tokens=10**30)))]))),
    ("train-data-empty-dir", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(_mkdir(c / "empty"))]))),
    ("train-data-too-short", 2, lambda w, c: _train(recipe_in(w, c, data__dtype="uint16", data__paths=[str(
        _bare(c, np.arange(10, dtype=np.uint16)))]))),
    ("train-run-dir-dev-null", 2, lambda w, c: _train(recipe_in(w, c), "--set", "run_dir=/dev/null")),
    ("train-run-dir-fifo", 2, lambda w, c: _train(recipe_in(w, c), "--set", f"run_dir={_fifo(c / 'r')}")),
    ("train-run-dir-newline", 2, lambda w, c: _train(recipe_in(w, c), "--set",
                                                     f"run_dir={_write(c / 'a', 'x') / 'b'}\nc")),
    ("train-init-from-file", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(_write(c / "ck", "x")))),
    ("train-init-from-hf-folder", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(w.hf))),
    ("train-init-from-other-shape", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.d_model=128",
                                                           "--set", "model.mlp_hidden=256", "--init-from",
                                                           str(w.ckpt))),
    ("train-init-from-empty-dir", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(_mkdir(c / "e")))),
    # ------------------------------------------------------------------ train --resume
    ("resume-state-is-dir", 2, lambda w, c: (_mkdir(_unlink(_latest(copy_run(w, c)) / "train_state.json")),
                                             _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-state-missing", 2, lambda w, c: (_unlink(_latest(copy_run(w, c)) / "train_state.json"),
                                              _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-metadata-missing", 2, lambda w, c: (_unlink(_latest(copy_run(w, c)) / ".metadata"),
                                                 _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-distcp-missing", 2, lambda w, c: (_unlink(_ckpt_file(copy_run(w, c))),
                                               _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-step-negative", 2, lambda w, c: (_state(w, c, {"step": -5}), _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-step-string", 2, lambda w, c: (_state(w, c, {"step": "ten"}), _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-step-huge", 2, lambda w, c: (_state(w, c, {"step": 10**40}), _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-state-deep", 2, lambda w, c: (_write(_latest(copy_run(w, c)) / "train_state.json", DEEP),
                                           _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-other-shape", 2, lambda w, c: (copy_run(w, c), _train(recipe_in(w, c), "--resume", "--set",
                                                                   "model.d_model=128", "--set",
                                                                   "model.mlp_hidden=256"))[1]),
    ("resume-checkpoints-is-file", 2, lambda w, c: (_write(c / "run" / "checkpoints", "x"),
                                                    _train(recipe_in(w, c), "--resume"))[1]),
    ("export-checkpoint-is-file", 2, lambda w, c: ["export-hf", str(_write(c / "ck", "x")), str(c / "out")]),
    ("export-checkpoint-empty-dir", 2, lambda w, c: ["export-hf", str(_mkdir(c / "ck")), str(c / "out")]),
    ("export-checkpoint-fifo", 2, lambda w, c: ["export-hf", str(_fifo(c / "ck")), str(c / "out")]),
    ("export-state-missing", 2, lambda w, c: ["export-hf", str(_unlink(_latest(copy_run(w, c)) / "train_state.json")
                                                               .parent), str(c / "out")]),
    ("export-metadata-missing", 2, lambda w, c: ["export-hf", str(_unlink(_latest(copy_run(w, c)) / ".metadata")
                                                                  .parent), str(c / "out")]),
    ("export-state-deep", 2, lambda w, c: ["export-hf", str(_write(_latest(copy_run(w, c)) / "train_state.json", DEEP)
                                                            .parent), str(c / "out")]),
    ("export-state-config-garbage", 2, lambda w, c: ["export-hf", str(_latest(_state(w, c, {"config": 7}))),
                                                     str(c / "out")]),
    ("export-output-dev-null", 2, lambda w, c: ["export-hf", str(w.ckpt), "/dev/null"]),
    ("export-output-fifo", 2, lambda w, c: ["export-hf", str(w.ckpt), str(_fifo(c / "out"))]),
    ("export-output-newline", 2, lambda w, c: ["export-hf", str(w.ckpt), str(_write(c / "f", "x") / "o\nut")]),
    ("export-tokenizer-dir", 2, lambda w, c: ["export-hf", str(w.ckpt), str(c / "out"), "--tokenizer",
                                              str(_mkdir(c / "tok"))]),
    ("export-tokenizer-missing", 2, lambda w, c: ["export-hf", str(w.ckpt), str(c / "out"), "--tokenizer",
                                                  str(c / "tok.json")]),
    ("export-tokenizer-fifo", 2, lambda w, c: ["export-hf", str(w.ckpt), str(c / "out"), "--tokenizer",
                                               str(_fifo(c / "tok.json"))]),
    ("export-json-bad", 2, lambda w, c: ["export-hf", str(c / "nope"), str(c / "out"), "--json"]),
    ("export-state-model-huge", 2, lambda w, c: ["export-hf", str(_latest(_model_edit(w, c, d_model=2**40))),
                                                 str(c / "out")]),
    ("export-state-model-layers-text", 2, lambda w, c: ["export-hf", str(_latest(_model_edit(w, c, n_layers="x"))),
                                                        str(c / "out")]),
    ("export-state-model-unknown-key", 2, lambda w, c: ["export-hf", str(_latest(_model_edit(w, c, bogus=1))),
                                                        str(c / "out")]),
    ("init-from-state-model-huge", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(_latest(
        _model_edit(w, c, vocab_size=2**40, d_model=2**30))))),
    ("resume-state-model-nan-eps", 2, lambda w, c: (_model_edit(w, c, norm_eps=float("nan")),
                                                    _train(recipe_in(w, c), "--resume"))[1]),
    # ------------------------------------------------------------------ import-hf
    ("import-config-is-dir", 2, lambda w, c: ["import-hf", str(_mkdir(_unlink(_hf_copy(w, c) / "config.json"))
                                                               .parent), str(c / "out")]),
    ("import-config-null", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "config.json", "null").parent),
                                            str(c / "out")]),
    ("import-config-deep", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "config.json", DEEP).parent),
                                            str(c / "out")]),
    ("import-config-fifo", 2, lambda w, c: ["import-hf", str(_fifo(_unlink(_hf_copy(w, c) / "config.json")).parent),
                                            str(c / "out")]),
    ("import-config-vocab-zero", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(vocab_size=0))), str(c / "out")]),
    ("import-config-heads-not-dividing", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_attention_heads=3))), str(c / "out")]),
    ("import-config-huge-hidden", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(hidden_size=2**40, intermediate_size=2**41))), str(c / "out")]),
    ("import-config-eps-nan", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "config.json", (
        w.hf / "config.json").read_text().replace('"rms_norm_eps": ', '"rms_norm_eps": NaN, "x": ')).parent),
        str(c / "out")]),
    ("import-config-rope-negative", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(rope_theta=-1))), str(c / "out")]),
    ("import-config-bool-layers", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_hidden_layers=True))), str(c / "out")]),
    # a red-team pass: 0 key/value heads silently meant "as many as the query heads", and a layer_types string was
    # read letter by letter as that many layers' windows
    ("import-config-kv-heads-zero", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_key_value_heads=0))), str(c / "out")]),
    ("import-config-kv-heads-text", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(num_key_value_heads="2"))), str(c / "out")]),
    ("import-config-layer-types-text", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(model_type="olmo3", layer_types="abc", sliding_window=16))), str(c / "out")]),
    ("import-config-layer-types-short", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(model_type="olmo3", layer_types=["full_attention"], sliding_window=16))),
        str(c / "out")]),
    ("import-no-weights", 2, lambda w, c: ["import-hf", str(_unlink(_hf_copy(w, c) / "model.safetensors").parent),
                                           str(c / "out")]),
    ("import-weights-dir", 2, lambda w, c: ["import-hf", str(_mkdir(_unlink(_hf_copy(w, c) / "model.safetensors"))
                                                             .parent), str(c / "out")]),
    ("import-weights-dev-zero", 2, lambda w, c: ["import-hf", str(_link(_hf_copy(w, c) / "model.safetensors",
                                                                        "/dev/zero").parent), str(c / "out")]),
    ("import-weights-empty", 2, lambda w, c: ["import-hf", str(_write(_hf_copy(w, c) / "model.safetensors", b"")
                                                               .parent), str(c / "out")]),
    ("import-weights-huge-header", 2, lambda w, c: ["import-hf", str(_write(
        _hf_copy(w, c) / "model.safetensors", (2**62).to_bytes(8, "little") + b"{}").parent), str(c / "out")]),
    ("import-weights-wrong-shape", 2, lambda w, c: ["import-hf", str(_hf_config(
        w, c, lambda d: d.update(hidden_size=128, intermediate_size=256))), str(c / "out")]),
    ("import-index-missing-file", 2, lambda w, c: ["import-hf", str(_write(
        _hf_copy(w, c) / "model.safetensors.index.json", json.dumps({"weight_map": {"a": "gone.safetensors"}})
    ).parent), str(c / "out")]),
    ("import-index-map-list", 2, lambda w, c: ["import-hf", str(_write(
        _hf_copy(w, c) / "model.safetensors.index.json", json.dumps({"weight_map": ["x"]})).parent), str(c / "out")]),
    ("import-index-file-not-string", 2, lambda w, c: ["import-hf", str(_write(
        _hf_copy(w, c) / "model.safetensors.index.json", json.dumps({"weight_map": {"a": 5}})).parent),
        str(c / "out")]),
    ("import-output-under-file", 2, lambda w, c: ["import-hf", str(w.hf), str(_write(c / "f", "x") / "out")]),
    ("import-output-dev-null", 2, lambda w, c: ["import-hf", str(w.hf), "/dev/null"]),
    ("import-input-fifo", 2, lambda w, c: ["import-hf", str(_fifo(c / "hf")), str(c / "out")]),
    ("import-json-bad", 2, lambda w, c: ["import-hf", str(c / "nope"), str(c / "out"), "--json"]),
    ("train-set-recursive-alias", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'data.paths=&a [*a]')),
    ("train-set-betas-short", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'optim.betas=[0.9]')),
    ("train-set-betas-out-of-range", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'optim.betas=[2, 3]')),
    ("train-set-log-interval-zero", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'log_interval=0')),
    ("train-set-save-interval-zero", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'save_interval=0')),
    ("train-set-save-interval-negative", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'save_interval=-1')),
    ("train-set-val-fraction-big", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'data.val_fraction=1.5')),
    ("train-set-val-fraction-nan", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'data.val_fraction=.nan')),
    ("train-set-micro-batch-zero", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'micro_batch_size=0')),
    ("train-set-kv-heads-not-dividing", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'model.n_kv_heads=3')),
    ("train-set-head-dim-odd", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'model.head_dim=7')),
    ("train-set-max-seq-short", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'model.max_seq_len=10')),
    ("train-set-window-zero", 2, lambda w, c: _train(recipe_in(w, c), "--set", "model.sliding_window=[0, 0]")),
    ("train-set-eval-batches-zero", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'eval_batches=0')),
    ("train-set-steps-zero", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'steps=0')),
    ("train-set-final-lr-nan", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'optim.final_lr_ratio=.nan')),
    ("train-set-keep-last-negative", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'keep_last_n=-1')),
    ("train-device-garbage", 2, lambda w, c: ["train", recipe_in(w, c), "--device", "cuda:abc"]),
    ("train-set-device-garbage", 2, lambda w, c: ["train", recipe_in(w, c), "--set", "device=gpu0"]),
    ("train-set-data-seed-string", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'data.seed=abc')),
    ("train-set-dtype-number", 2, lambda w, c: _train(recipe_in(w, c), "--set", 'data.dtype=16')),
    ("train-py-wrong-nested-type", 2, lambda w, c: _train(_yaml(
        c, "from olmo.config import TrainConfig\ndef recipe():\n    c = TrainConfig()\n    c.model.n_layers = '4'\n"
           "    return c\n", "r.py"))),
    ("train-py-double-colon", 2, lambda w, c: _train(_yaml(c, "def recipe():\n    return 1\n", "r.py") + ":a:b")),
    # ------------------------------------------------------------------ metadata that is not a regular file
    ("val-manifest-fifo", 1, lambda w, c: ["validate-shards", str(_fifo(_unlink(copy_data(w, c) / "manifest.json"))
                                                                  .parent)]),
    ("val-manifest-dev-zero", 1, lambda w, c: ["validate-shards", str(_link(copy_data(w, c) / "manifest.json",
                                                                            "/dev/zero").parent)]),
    ("val-sidecar-fifo", 1, lambda w, c: ["validate-shards", str(_fifo(_unlink(
        _no_manifest(copy_data(w, c)) / "part-00000.json")).parent)]),
    ("train-manifest-dev-zero", 2, lambda w, c: _train(recipe_in(w, c, data__paths=[str(
        _link(copy_data(w, c) / "manifest.json", "/dev/zero").parent)]))),
    ("resume-state-dev-zero", 2, lambda w, c: (_link(_latest(copy_run(w, c)) / "train_state.json", "/dev/zero"),
                                               _train(recipe_in(w, c), "--resume"))[1]),
    ("resume-state-fifo", 2, lambda w, c: (_fifo(_unlink(_latest(copy_run(w, c)) / "train_state.json")),
                                           _train(recipe_in(w, c), "--resume"))[1]),
    ("export-state-dev-zero", 2, lambda w, c: ["export-hf", str(_link(_latest(copy_run(w, c)) / "train_state.json",
                                                                      "/dev/zero").parent), str(c / "out")]),
    ("core-export-config-dev-zero", 2, lambda w, c: ["export-hf", str(_link(_core(w, c, {"model": CORE_MODEL}) /
                                                                            "config.json", "/dev/zero").parent),
                                                     str(c / "out")]),
    ("core-export-config-fifo", 2, lambda w, c: ["export-hf", str(_fifo(_unlink(_core(w, c, {"model": CORE_MODEL}) /
                                                                                "config.json")).parent),
                                                 str(c / "out")]),
    # ------------------------------------------------------------------ lock files planted in the output
    ("lock-symlink-out-train", 2, lambda w, c: _train(recipe_in(w, c), "--set", f"run_dir={_planted(c, 'run')}")),
    ("lock-symlink-out-resume", 2, lambda w, c: (copy_run(w, c), _link(c / "run" / ".olmo.lock", _victim(c)),
                                                 _train(recipe_in(w, c), "--resume"))[2]),
    ("lock-symlink-out-prepare", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(_planted(c, "o")),
                                                  *PREP]),
    ("lock-fifo-train", 2, lambda w, c: _train(recipe_in(w, c), "--set",
                                               f"run_dir={_fifo(_mkdir(c / 'r') / '.olmo.lock').parent}")),
    ("lock-dir-prepare", 2, lambda w, c: ["prepare-data", "-i", str(w.docs), "-o", str(_mkdir(_mkdir(c / "o") /
                                                                                              ".olmo.lock").parent),
                                          *PREP]),
    # ------------------------------------------------------------------ OLMo-core-style folders, damaged
    ("core-export-config-model-list", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": []})), str(c / "out")]),
    ("core-export-config-deep", 2, lambda w, c: ["export-hf", str(_core(w, c, DEEP)), str(c / "out")]),
    ("core-export-config-not-utf8", 2, lambda w, c: ["export-hf", str(_core(w, c, b"\xff\xfe")), str(c / "out")]),
    ("core-export-block-list", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": {**CORE_MODEL, "block": []}})),
                                                str(c / "out")]),
    ("core-export-huge-width", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": {**CORE_MODEL,
                                                                                        "d_model": 2**40}})),
                                                str(c / "out")]),
    ("core-export-layers-string", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": {**CORE_MODEL,
                                                                                           "n_layers": "2"}})),
                                                   str(c / "out")]),
    ("core-export-window-strings", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": {**CORE_MODEL, "block": {
        "attention": {"n_heads": 4, "sliding_window": {"pattern": ["a", None]}}}}})), str(c / "out")]),
    ("core-export-pickle-exploit", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": CORE_MODEL},
                                                                           _exploit(c))), str(c / "out")]),
    ("core-export-metadata-empty", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": CORE_MODEL}, b"")),
                                                    str(c / "out")]),
    ("core-export-no-distcp", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": CORE_MODEL}, None, False)),
                                               str(c / "out")]),
    ("core-export-save-folder-damaged", 2, lambda w, c: ["export-hf", str(_core(w, c, {"model": []}).parent),
                                                         str(c / "out")]),
    ("core-init-from-pickle-exploit", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(
        _core(w, c, {"model": CORE_MODEL}, _exploit(c))))),
    ("core-init-from-config-deep", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(_core(w, c, DEEP)))),
    ("core-init-from-other-model", 2, lambda w, c: _train(recipe_in(w, c), "--init-from", str(
        _core(w, c, {"model": {**CORE_MODEL, "d_model": 128}})))),
    ("core-resume-damaged", 2, lambda w, c: (_core(w, c, {"model": []}, base=c / "run" / "checkpoints"),
                                             _train(recipe_in(w, c), "--resume"))[1]),
    # ------------------------------------------------------------------ interrupted runs
    ("core-fresh-over-core-run", 2, lambda w, c: (_core(w, c, {"model": CORE_MODEL}, base=c / "run" / "checkpoints"),
                                                  _train(recipe_in(w, c)))[1]),
    ("interrupted-prepare-other-inputs", 2, lambda w, c: ["prepare-data", "-i", str(_write(
        c / "other.jsonl", '{"text": "another corpus"}\n')), "-o", str(_half_prepared(w, c)), *PREP]),
]

CORE_MODEL: dict[str, Any] = {"d_model": 64, "n_layers": 2, "vocab_size": 768,
                              "block": {"attention": {"n_heads": 4}, "feed_forward": {"hidden_size": 128}}}


def _core(w: World, c: Path, config: object, metadata: bytes | None = None, distcp: bool = True,
          base: Path | None = None) -> Path:
    """An OLMo-core-style checkpoint folder (step2/model_and_optim/ + config.json) made from the world's
    checkpoint files, with `config` (a dict, or raw text/bytes) and optionally other `.metadata` bytes."""
    ck = (base or c / "core") / "step2"
    dcp = ck / "model_and_optim"
    dcp.mkdir(parents=True)
    for f in w.ckpt.iterdir():
        if f.name == ".metadata" or (distcp and f.name.endswith(".distcp")):
            (dcp / f.name).write_bytes(f.read_bytes() if metadata is None or f.name != ".metadata" else metadata)
    raw = config if isinstance(config, str | bytes) else json.dumps(config)
    _write(ck / "config.json", raw)
    return ck


class _Pwn:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[str, ...]]:
        return (os.system, (f"touch {self.target}",))


def _exploit(c: Path) -> bytes:
    """A `.metadata` pickle that would run a command when loaded with plain pickle."""
    import pickle

    return pickle.dumps(_Pwn(c / "pwned"))


def _half_prepared(w: World, c: Path) -> Path:
    """prepare-data's output as a kill after its first shard leaves it: sidecars, no manifest."""
    d = copy_data(w, c)
    (d / "manifest.json").unlink()
    return d


def _unlink(path: Path) -> Path:
    path.unlink()
    return path


def _no_manifest(d: Path) -> Path:
    (d / "manifest.json").unlink()
    return d


def test_the_table_is_large_and_distinct() -> None:
    assert len(CASES) >= 80 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "code", "build"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(name: str, code: int, build: Build, world: World, cli: CLI,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, out = run_bad_input(name, code, build, world, cli, tmp_path, monkeypatch)
    assert not (tmp_path / "case" / "pwned").exists(), f"{name}: a command in the input ran"
    if "--json" in args:
        assert json.loads(out)["ok"] is False, f"{name}: --json printed {out!r}"
