"""Attacks through files `olmo` reads from elsewhere (issue #12): a checkpoint's `.metadata` pickle that names a
class DCP never pickles, JSON and YAML nested thousands deep, and paths whose names are rich markup. Each is
refused as bad input (or printed as written), never run, never a traceback."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo import checkpoint_reader
from olmo.config import ConfigError
from olmo.data.corpus import TOKENIZER_PATH
from olmo.errors import OlmoError
from olmo.interop import hf, olmo_core
from olmo.recipe import load_recipe

DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _call(module: str, name: str, *args: object) -> bytes:
    """A pickle whose load calls module.name(*args): what a crafted `.metadata` would hold."""
    head = b"\x80\x02c" + f"{module}\n{name}\n".encode()
    return head + pickle.dumps(args, protocol=2)[2:-1] + b"R."


@pytest.mark.parametrize("module,name,args", [
    # classes the DCP modules merely import, or whose constructor acts
    ("torch.distributed.checkpoint.filesystem", "FileSystemWriter", ("{marker}",)),
    ("torch.distributed.checkpoint.filesystem", "Tensor", (10**9,)),
    ("torch.distributed.checkpoint.filesystem", "Path", ("{marker}",)),
    ("torch.distributed.checkpoint.filesystem", "_OverlappingCpuLoader", (None,)),
    ("torch.distributed.checkpoint.filesystem", "ExtensionRegistry", ()),
    ("torch.distributed.checkpoint.metadata", "Enum", ("E", "a b")),
    ("torch.distributed.checkpoint._extension", "ZStandard", ()),
    ("torch.distributed.checkpoint.filesystem", "os", ()),
    ("torch.distributed.checkpoint.filesystem", "__builtins__", ()),
    ("builtins", "open", ("{marker}", "w")),
    ("builtins", "getattr", ("x", "upper")),
    ("torch", "save", ({}, "{marker}")),
    ("torch", "load", ("{marker}",)),
])
def test_metadata_naming_anything_but_dcp_data_is_refused(tmp_path: Path, module: str, name: str,
                                                          args: tuple[object, ...]) -> None:
    marker = tmp_path / "marker"
    dcp = tmp_path / "ck"
    dcp.mkdir()
    real = tuple(str(marker) if a == "{marker}" else a for a in args)
    (dcp / ".metadata").write_bytes(_call(module, name, *real))
    with pytest.raises(ConfigError, match="refusing to load it"):
        checkpoint_reader.read_metadata(dcp)
    assert not marker.exists()


def test_dcp_data_classes_are_still_admitted() -> None:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

    for module, cls in [("torch.distributed.checkpoint.metadata", Metadata),
                        ("torch.distributed.checkpoint.metadata", TensorStorageMetadata),
                        ("torch.distributed.checkpoint.filesystem", _StorageInfo)]:
        assert checkpoint_reader.safe_class(module, cls.__name__) is cls


@pytest.mark.parametrize("reader", ["hf-config", "hf-index", "olmo-core-config", "checkpoint-state", "manifest"])
def test_json_nested_too_deep_is_bad_input(tmp_path: Path, reader: str) -> None:
    from olmo import checkpoint
    from olmo.data.shards import load_manifest

    target = {"hf-config": "config.json", "hf-index": "model.safetensors.index.json",
              "olmo-core-config": olmo_core.CONFIG_JSON, "checkpoint-state": checkpoint.TRAIN_STATE,
              "manifest": "manifest.json"}[reader]
    (tmp_path / target).write_text(DEEP_JSON)
    call: Callable[[], object] = {
        "hf-config": lambda: hf._read_hf_config(tmp_path / target),
        "hf-index": lambda: hf._index_files(tmp_path / target),
        "olmo-core-config": lambda: olmo_core.read_model_config(tmp_path),
        "checkpoint-state": lambda: checkpoint._parse_state(tmp_path),
        "manifest": lambda: load_manifest(tmp_path),
    }[reader]
    try:
        result = call()
    except (OlmoError, ValueError):  # the readers' own bad-input errors (a RecursionError is neither)
        return
    assert isinstance(result, str)  # _parse_state returns its problem as text


@pytest.mark.parametrize("text", ["model: " + "[" * 50_000 + "]" * 50_000,
                                  "model:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 900)),
                                  "optim: " + "{a: " * 20_000 + "1" + "}" * 20_000])
def test_a_recipe_nested_too_deep_is_one_line(tmp_path: Path, text: str,
                                               cli: Callable[..., tuple[int, str, str]]) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_recipe(str(recipe))
    code, _, err = cli("train", str(recipe), "--device", "cpu")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_deep_override_value_stays_text(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("optim:\n  lr: 0.001\n")
    with pytest.raises(ConfigError) as e:
        load_recipe(str(recipe), ["optim.lr=" + "[" * 50_000])
    assert "nested" not in str(e.value) or "lr" in str(e.value)


@pytest.mark.parametrize("folder", ["x[", "a[link=file:x]b", "[bold red]"])
def test_prepare_data_prints_markup_paths_as_written(tmp_path: Path, folder: str,
                                                     cli: Callable[..., tuple[int, str, str]]) -> None:
    """`x[` + `/b]...`: the path reads as a closing tag; it crashed the printer after the shards were written."""
    src = tmp_path / folder / "b]docs.jsonl"
    src.parent.mkdir(parents=True)
    src.write_text(json.dumps({"text": "hello world"}) + "\nnot json\n")
    out = tmp_path / folder / "b]out"
    code, stdout, err = cli("prepare-data", "-i", str(src), "-o", str(out), "-t", str(TOKENIZER_PATH))
    assert code == 0, err
    assert f"{folder}/b]docs.jsonl: skipped 1 line" in err and f"{folder}/b]out" in stdout


@pytest.mark.parametrize("kind", ["symlink", "dangling-symlink", "fifo"])
def test_a_planted_lock_file_is_never_followed_or_waited_on(tmp_path: Path, kind: str,
                                                            cli: Callable[..., tuple[int, str, str]]) -> None:
    """`.olmo.lock -> ~/.bashrc` in a folder someone else prepared: taking the lock truncated and rewrote the
    target; a fifo there blocked the open forever."""
    import os

    from olmo.lock import LOCK_NAME, DirLock

    outside = tmp_path / "precious.txt"
    if kind != "dangling-symlink":
        outside.write_text("precious\n")
    out = tmp_path / "data"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / LOCK_NAME)
    else:
        (out / LOCK_NAME).symlink_to(outside)
    with pytest.raises(OlmoError, match=r"symlink|not a regular file|not a plain file"):
        DirLock(out, "output").check_free()  # refused at once: never followed, never waited on
    with pytest.raises(OlmoError, match=r"symlink|not a regular file|not a plain file"):
        DirLock(out, "output").acquire()
    src = tmp_path / "d.jsonl"
    src.write_text(json.dumps({"text": "hello world"}) + "\n")
    code, _, err = cli("prepare-data", "-i", str(src), "-o", str(out), "-t", str(TOKENIZER_PATH))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    if kind == "dangling-symlink":
        assert not outside.exists()
    elif kind == "symlink":
        assert outside.read_text() == "precious\n"


def test_a_planted_metrics_symlink_is_never_appended_through(tmp_path: Path) -> None:
    from olmo.metrics import MetricsLog
    from olmo.train import _trim_metrics

    outside = tmp_path / "bashrc"
    outside.write_text("export PATH=/usr/bin\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(outside)
    _trim_metrics(run / "metrics.jsonl", 0)
    with pytest.raises(OlmoError, match="symlink"):
        MetricsLog(run, {})
    assert outside.read_text() == "export PATH=/usr/bin\n" and (run / "metrics.jsonl").is_symlink()


def test_torn_or_foreign_metrics_lines_are_trimmed_not_a_crash(tmp_path: Path) -> None:
    from olmo.train import _trim_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 5}\n[1, 2]\n{"step": null}\n{"step": 2, "lo\n' + "[" * 50_000 + "\n")
    _trim_metrics(path, 3)
    assert path.read_text() == '{"step": 1}\n'


def test_a_planted_shard_temp_symlink_is_not_written_through(tmp_path: Path,
                                                              cli: Callable[..., tuple[int, str, str]]) -> None:
    """`.part-00000.npy.tmp -> ~/.bashrc` in an output folder someone else prepared: the shard writer opened it
    for writing and filled the target with tokens. The folder is not prepare-data's own: refused, link and target
    untouched."""
    outside = tmp_path / "bashrc"
    outside.write_text("export PATH=/usr/bin\n")
    out = tmp_path / "data"
    out.mkdir()
    (out / ".part-00000.npy.tmp").symlink_to(outside)
    src = tmp_path / "d.jsonl"
    src.write_text(json.dumps({"text": "hello world"}) + "\n")
    code, _, err = cli("prepare-data", "-i", str(src), "-o", str(out), "-t", str(TOKENIZER_PATH))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "prepare-data did not write it" in err, err
    assert outside.read_text() == "export PATH=/usr/bin\n"
    assert [p.name for p in out.iterdir()] == [".part-00000.npy.tmp"] and (out / ".part-00000.npy.tmp").is_symlink()


def test_the_shard_writer_never_opens_a_planted_temp_through_its_link(tmp_path: Path) -> None:
    from olmo.data.prepare import ShardWriter

    outside = tmp_path / "bashrc"
    outside.write_text("export PATH=/usr/bin\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".part-00000.npy.tmp").symlink_to(outside)
    writer = ShardWriter(tmp_path / "out", 0, "uint16")
    writer.f.write(b"\0\1" * 8)
    writer.f.abort()
    assert outside.read_text() == "export PATH=/usr/bin\n"
    assert [p.name for p in (tmp_path / "out").iterdir()] == [".part-00000.npy.tmp"]  # the link alone, untouched


def test_atomic_writes_never_write_through_a_planted_temp(tmp_path: Path) -> None:
    """`.latest.tmp<pid>` (an older version's temp name) planted as a symlink in a shared run_dir: the atomic write
    opened it and wrote the target. Temp names are now fresh (O_EXCL): the link is neither followed nor removed."""
    import os

    from olmo.fsutil import atomic_write_bytes

    outside = tmp_path / "bashrc"
    outside.write_text("export PATH=/usr/bin\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / f".latest.tmp{os.getpid()}").symlink_to(outside)
    atomic_write_bytes(tmp_path / "run" / "latest", b"step10\n")
    assert outside.read_text() == "export PATH=/usr/bin\n"
    assert (tmp_path / "run" / "latest").read_bytes() == b"step10\n"
    assert not (tmp_path / "run" / "latest").is_symlink()
    assert (tmp_path / "run" / f".latest.tmp{os.getpid()}").is_symlink()


def test_a_symlinked_output_is_refused_and_what_it_points_at_kept(tmp_path: Path) -> None:
    """export-hf / import-hf / prepare-data never replace a link (it is not theirs), nor write through it."""
    from olmo import outputs
    from olmo.errors import OlmoError

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep\n")
    out = tmp_path / "hf"
    out.symlink_to(precious)
    for command in ("export-hf", "import-hf", "prepare-data"):
        with pytest.raises(OlmoError, match="it is a symlink"):
            outputs.claim(out, command)
    assert out.is_symlink() and [p.name for p in precious.iterdir()] == ["keep.txt"]


def test_removing_a_symlinked_checkpoint_folder_removes_only_the_link(tmp_path: Path) -> None:
    from olmo.fsutil import remove_tree

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("keep\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "step5").symlink_to(precious)
    (run / "step5-deleting").symlink_to(precious)  # a planted trash name (an older version's) too: not touched
    remove_tree(run / "step5")
    assert (precious / "keep.txt").read_text() == "keep\n"
    assert sorted(p.name for p in run.iterdir()) == ["step5-deleting"]
