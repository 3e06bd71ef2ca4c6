"""A full disk during a checkpoint save or prepare-data: one line "no space left on DEVICE (needs about N GB)",
exit 2, no half checkpoint or half shard, earlier checkpoints and finished shards kept, and a rerun resumes.
The disk fills by monkeypatching the writes to raise what a full disk raises (OSError ENOSPC, or torch.save's
RuntimeError from its zip writer)."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo import checkpoint
from olmo.config import TrainConfig
from olmo.data import prepare
from olmo.data.corpus import CORPUS_PATH
from olmo.recipe import to_yaml

CLI = Callable[..., tuple[int, str, str]]
FULL = {
    "enospc": lambda: OSError(errno.ENOSPC, "No space left on device"),
    "torch-zip-writer": lambda: RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 4608 vs 4502"),
}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", list(FULL))
def test_checkpoint_save_on_a_full_disk(kind: str, tmp_path: Path, tiny_data: Path, cli: CLI,
                                        micro: Callable[..., TrainConfig], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.checkpoint.filesystem as fs

    import olmo.cli.gate
    import olmo.cli.main

    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    cfg = micro(tiny_data, tmp_path / "run", steps=4)
    cfg.save_interval, cfg.eval_interval, cfg.log_interval = 2, 0, 2
    recipe = tmp_path / "r.yaml"
    recipe.write_text(to_yaml(cfg))
    real = fs._write_item
    kept: dict[str, bytes] = {}

    def write_item(*args: object, **kw: object) -> object:
        if "step4" not in str(getattr(args[1], "name", "")):
            return real(*args, **kw)  # type: ignore[arg-type]
        if not kept:
            kept.update(_tree(tmp_path / "run" / "checkpoints" / "step2"))
        args[1].write(b"\0" * 100)  # type: ignore[attr-defined]  # part of it lands, then the disk is full
        raise FULL[kind]()

    monkeypatch.setattr(fs, "_write_item", write_item)
    code, _, err = cli("train", str(recipe), "--device", "cpu")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("olmo: no space left on /") and "(needs about " in lines[0] and " GB)" in lines[0]
    assert "--resume continues from step2" in lines[0]
    root = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step2"]  # no half checkpoint
    assert _tree(root / "step2") == kept and checkpoint.verify(root / "step2") is None
    monkeypatch.setattr(fs, "_write_item", real)
    code, out, err = cli("train", str(recipe), "--device", "cpu", "--resume")
    assert code == 0 and "resumed from" in out and (root / "step4").is_dir(), err


def test_prepare_data_on_a_full_disk_keeps_finished_shards_and_resumes(tmp_path: Path, cli: CLI,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ref = tmp_path / "ref"
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(ref), "-t", "bundled", "--shard-size",
                       "30K", "--workers", "1", "-q")
    assert code == 0, err
    real = prepare.ShardWriter.write

    def write(self: prepare.ShardWriter, ids: object, docs: int) -> None:
        if self.name == "part-00002.npy" and self.tokens > 1000:
            self.f.write(b"\0" * 64)  # a partial write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, ids, docs)  # type: ignore[arg-type]

    monkeypatch.setattr(prepare.ShardWriter, "write", write)
    out = tmp_path / "out"
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(out), "-t", "bundled", "--shard-size",
                       "30K", "--workers", "1", "-q")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("olmo: no space left on /"), err
    assert "(needs about " in lines[0] and "resumes after them" in lines[0]
    names = sorted(p.name for p in out.iterdir())
    assert names == [".olmo-output.json", "part-00000.json", "part-00000.npy", "part-00001.json", "part-00001.npy",
                     "prepare.json"]
    for name in ("part-00000.npy", "part-00001.npy"):  # the finished shards are whole
        assert (out / name).read_bytes() == (ref / name).read_bytes()
    monkeypatch.setattr(prepare.ShardWriter, "write", real)
    code, out_text, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(out), "-t", "bundled",
                              "--shard-size", "30K", "--workers", "1", "-q")
    assert code == 0 and "resumed an interrupted run: kept 2" in out_text, err
    assert {k: v for k, v in _tree(out).items() if k.endswith(".npy")} == \
        {k: v for k, v in _tree(ref).items() if k.endswith(".npy")}


def test_full_disk_is_recognised_through_wrappers() -> None:
    from olmo.errors import is_disk_full

    class Wrapped:
        def __init__(self, exc: BaseException):
            self.exc = exc

    class CheckpointLike(BaseException):
        def __init__(self, failures: dict[int, object]):
            super().__init__("boom")
            self.failures = failures

    assert is_disk_full(CheckpointLike({3: Wrapped(OSError(errno.EDQUOT, "quota"))}))
    try:
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(OSError(errno.EACCES, "denied")) and not is_disk_full(RuntimeError("other"))


@pytest.mark.parametrize("resumable", [True, False], ids=["worker-died", "bad-input-mid-run"])
def test_machine_failures_keep_finished_shards_bad_input_removes_them(resumable: bool, tmp_path: Path, cli: CLI,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo.errors import OlmoError, Resumable

    real = prepare.ShardWriter.write

    def write(self: prepare.ShardWriter, ids: object, docs: int) -> None:
        if self.name == "part-00002.npy":
            raise (Resumable if resumable else OlmoError)("stop here")
        real(self, ids, docs)  # type: ignore[arg-type]

    monkeypatch.setattr(prepare.ShardWriter, "write", write)
    out = tmp_path / "new" / "out"
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(out), "-t", "bundled", "--shard-size",
                       "30K", "--workers", "1", "-q")
    assert code == 2 and err.strip() == "olmo: stop here"
    if resumable:
        assert sorted(p.name for p in out.iterdir()) == [".olmo-output.json", "part-00000.json", "part-00000.npy",
                                                         "part-00001.json", "part-00001.npy", "prepare.json"]
    else:
        assert not (tmp_path / "new").exists()
