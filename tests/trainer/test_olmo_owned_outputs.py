"""An `olmo` command deletes or replaces only what it created (olmo/outputs.py), written as attacks: each case
points a command that writes an output folder (export-hf, import-hf, prepare-data, the smoke run's --keep) at
something it did not make, with --overwrite, and asserts one line, exit 2, and every byte of the sandbox (file
contents, links, folders) the same afterwards.

Where the cases come from: the two export-hf cases are the ones a red-team pass reported (the run deleted, every
run under runs/ deleted); prepare-data deleting a user's `manifest.json` and replacing shards a running `olmo
train` read is from the same pass; the rest are the family around them (what a folder is, what it holds, where
it lies, links swapped in, a user's file with our marker's name, nested outputs, a path inside the output).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from olmo import checkpoint, outputs
from olmo.data.corpus import CORPUS_PATH
from olmo.errors import OlmoError
from olmo.interop.hf import export_hf, import_hf
from olmo.train import train

CLI = Callable[..., tuple[int, str, str]]


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every path under `root` with what it is: a file's sha256, a link's target, a folder."""
    seen: dict[str, tuple[str, str]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                seen[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                seen[rel] = ("dir", "")
            else:
                with open(p, "rb") as f:
                    seen[rel] = ("file", hashlib.sha256(f.read()).hexdigest())
    return seen


@dataclass
class Built:
    root: Path  # one source of truth, copied into each case's sandbox


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path, micro: Callable[..., object]) -> Built:
    """data/ (prepare-data's output), run/ (a run_dir with a checkpoint), hf/ (export-hf's), ck/ (import-hf's)."""
    root = tmp_path_factory.mktemp("owned")
    shutil.copytree(tiny_data, root / "data")
    cfg = micro(root / "data", root / "run", steps=2)
    cfg.eval_interval, cfg.save_interval = 0, 2  # type: ignore[attr-defined]
    train(cfg)  # type: ignore[arg-type]
    export_hf(root / "run", root / "hf")
    import_hf(root / "hf", root / "ck")
    return Built(root)


@pytest.fixture
def box(built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sandbox: a copy of what `built` made, plus a user's folders, and the working folder set to it."""
    root = tmp_path / "box"
    shutil.copytree(built.root, root, symlinks=True)
    user = root / "user"
    user.mkdir()
    (user / "manifest.json").write_text('{"mine": true}\n')  # a user's own file that shares our file name
    (user / "notes.txt").write_text("precious\n")
    (root / "runs").mkdir()
    shutil.copytree(root / "run", root / "runs" / "tiny")
    shutil.copytree(root / "run", root / "runs" / "other")
    monkeypatch.chdir(root)
    return root


def _ckpt(box: Path) -> str:
    found = checkpoint.latest(box / "run")
    assert found is not None
    return str(found.relative_to(box))


def _plant_marker(folder: Path, command: str) -> Path:
    (folder / outputs.MARKER).write_text(json.dumps({"olmo_output": command}))
    return folder


# (case id, argv builder, words the one line must hold). Every case passes --overwrite: it must not matter.
ATTACKS: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("export-onto-its-own-run", lambda b: ["export-hf", "runs/tiny", "runs/tiny"], "it is a run_dir"),
    ("export-onto-the-runs-folder", lambda b: ["export-hf", "runs/tiny", "runs"], "it holds runs/"),
    ("export-onto-checkpoints", lambda b: ["export-hf", "run", "run/checkpoints"], "checkpoints folder"),
    ("export-onto-a-checkpoint", lambda b: ["export-hf", "run", _ckpt(b)], "it is a checkpoint"),
    ("export-onto-prepared-data", lambda b: ["export-hf", "run", "data"], "`olmo prepare-data`"),
    ("export-onto-a-users-folder", lambda b: ["export-hf", "run", "user"], "it is a data folder"),
    ("export-onto-a-users-plain-folder", lambda b: [
        "export-hf", "run", str(_write(b / "mine" / "notes.txt").parent)], "export-hf did not write it"),
    ("export-onto-the-working-folder", lambda b: ["export-hf", "run", "."], "it holds"),
    ("export-onto-a-link-to-the-run", lambda b: [
        "export-hf", "run", str(_link(b / "link", b / "run"))], "it is a symlink"),
    ("export-onto-a-link-to-its-own-output", lambda b: [
        "export-hf", "run", str(_link(b / "link", b / "hf"))], "it is a symlink"),
    ("export-onto-import-output", lambda b: ["export-hf", "run", "ck"], "`olmo import-hf`"),
    ("export-own-output-with-a-users-readme", lambda b: [
        "export-hf", "run", str(_write(b / "hf" / "README.md").parent)], "README.md, which export-hf did not write"),
    ("export-own-output-with-a-link-inside", lambda b: [
        "export-hf", "run", str(_link(b / "hf" / "tokenizer.json", b / "user" / "notes.txt", replace=True).parent)],
     "a link or special file"),
    ("export-own-output-with-a-nested-output", lambda b: [
        "export-hf", "run", str(_copy(b / "ck", b / "hf" / "ck").parent)], "ck"),
    ("export-own-output-holding-its-source", lambda b: [
        "export-hf", "hf/run", str(_copy(b / "run", b / "hf" / "run").parent)], "it holds run,"),
    ("export-planted-marker-in-a-checkpoint", lambda b: [
        "export-hf", "run", str(_plant_marker(Path(_ckpt(b)), "export-hf"))], "which export-hf did not write"),
    ("export-planted-marker-in-a-run", lambda b: [
        "export-hf", "runs/other", str(_plant_marker(b / "runs" / "tiny", "export-hf"))], "did not write"),
    ("export-into-a-checkpoint", lambda b: ["export-hf", "run", f"{_ckpt(b)}/hf"], "lies inside a checkpoint"),
    ("export-into-prepared-data", lambda b: ["export-hf", "run", "data/hf"], "lies inside the output of"),
    ("export-into-another-output", lambda b: ["export-hf", "run", "hf/nested"], "lies inside the output of"),
    ("export-replacing-inside-a-run", lambda b: [
        "export-hf", "run", str(_copy(b / "hf", b / "runs" / "tiny" / "hf"))], "lies inside a run_dir"),
    ("export-onto-a-file", lambda b: ["export-hf", "run", "user/notes.txt"], "is a file"),
    ("import-onto-a-checkpoint", lambda b: ["import-hf", "hf", _ckpt(b)], "it is a checkpoint"),
    ("import-onto-a-run", lambda b: ["import-hf", "hf", "runs/tiny"], "it is a run_dir"),
    ("import-onto-its-source", lambda b: ["import-hf", "hf", "hf"], "`olmo export-hf`"),
    ("import-planted-marker-in-a-checkpoint", lambda b: [
        "import-hf", "hf", str(_plant_marker(Path(_ckpt(b)), "import-hf"))], "which import-hf did not write"),
    ("prepare-onto-a-users-manifest", lambda b: ["prepare-data", "-i", str(CORPUS_PATH), "-o", "user", "-t",
                                                 "bundled"], "it is a data folder"),
    ("prepare-onto-a-run", lambda b: ["prepare-data", "-i", str(CORPUS_PATH), "-o", "runs/tiny", "-t", "bundled"],
     "it is a run_dir"),
    ("prepare-onto-an-export", lambda b: ["prepare-data", "-i", str(CORPUS_PATH), "-o", "hf", "-t", "bundled"],
     "`olmo export-hf`"),
    ("prepare-own-output-with-a-users-file", lambda b: [
        "prepare-data", "-i", str(CORPUS_PATH), "-o", str(_write(b / "data" / "notes.txt").parent), "-t", "bundled",
        "--shard-size", "7K"], "notes.txt, which prepare-data did not write"),
    ("smoke-keep-with-a-users-run-folder", lambda b: [
        "train", "--smoke", "--keep", str(_copy(b / "user", b / "keep" / "run").parent)], "it is a data folder"),
    ("smoke-keep-with-a-users-data-folder", lambda b: [
        "train", "--smoke", "--keep", str(_copy(b / "user", b / "keep" / "data").parent)], "another --keep"),
    ("smoke-keep-with-a-users-plain-run-folder", lambda b: [
        "train", "--smoke", "--keep", str(_write(b / "keep" / "run" / "x.txt").parent.parent)], "did not write it"),
]


def _link(at: Path, to: Path, replace: bool = False) -> Path:
    if replace:
        at.unlink()
    at.symlink_to(to.resolve())
    return at


def _write(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("mine\n")
    return path


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst, symlinks=True)
    return dst


@pytest.mark.parametrize(("case", "argv", "words"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_command_never_replaces_what_it_did_not_create(case: str, argv: Callable[[Path], list[str]], words: str,
                                                         box: Path, cli: CLI,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo.cli.gate

    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    args = argv(box)
    args += ["--overwrite"] * (args[0] != "train")
    before = snapshot(box)
    code, out, err = cli(*args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err + out, err
    assert words in lines[0], lines[0]
    assert snapshot(box) == before  # every file, link and folder as it was: nothing deleted, nothing added


def test_the_two_reported_export_cases(box: Path, cli: CLI) -> None:
    for target in ("runs/tiny", "runs"):
        before = snapshot(box)
        code, _, err = cli("export-hf", "runs/tiny", target, "--overwrite")
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("olmo: export-hf will not")
        assert snapshot(box) == before


def test_overwrite_replaces_its_own_output_by_rename_and_leaves_nothing_else(box: Path, cli: CLI) -> None:
    first = snapshot(box / "hf")
    code, _, err = cli("export-hf", "run", "hf", "--dtype", "bf16", "--overwrite")
    assert code == 0, err
    assert json.loads((box / "hf" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert outputs.marker_of(box / "hf") == "export-hf" and snapshot(box / "hf") != first
    assert not [p for p in box.iterdir() if p.name.startswith(".hf.")]  # no temp or moved-aside folder left
    code, _, err = cli("export-hf", "run", "hf")
    assert code == 2 and "pass --overwrite" in err


def test_a_failure_while_replacing_leaves_the_old_output(box: Path, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    import safetensors.torch

    def broken(*a: object, **k: object) -> None:
        raise OlmoError("the writer broke")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    before = snapshot(box)
    code, _, err = cli("export-hf", "run", "hf", "--overwrite")
    assert code == 2 and err.strip() == "olmo: the writer broke"
    assert snapshot(box) == before  # the old export whole, and no temp folder beside it


def test_a_full_disk_while_importing_over_an_earlier_import_keeps_it(box: Path, cli: CLI,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.checkpoint.filesystem as fs

    def full(*a: object, **k: object) -> None:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(fs, "_write_item", full)
    before = snapshot(box)
    code, _, err = cli("import-hf", "hf", "ck", "--overwrite")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("olmo: no space left on "), err
    assert "nothing was changed there" in lines[0] and snapshot(box) == before


def test_two_imports_into_one_folder_at_once(box: Path, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second import finishes while the first is still writing: the first then finds the folder taken and
    says so in one line (it had no --overwrite); the second's output is left whole."""
    from olmo import checkpoint as ck

    real = ck.write_weights
    calls = [0]

    def racing(*a: object, **k: object) -> None:
        real(*a, **k)  # type: ignore[arg-type]
        calls[0] += 1
        if calls[0] == 1:
            import_hf(box / "hf", box / "new")  # the other command, run to the end meanwhile

    monkeypatch.setattr(ck, "write_weights", racing)
    code, _, err = cli("import-hf", "hf", "new")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pass --overwrite" in err, err
    assert ck.verify(box / "new") is None and outputs.marker_of(box / "new") == "import-hf"
    assert not [p for p in box.iterdir() if p.name.startswith(".new.")]


def test_import_refuses_a_tokenizer_linked_out_of_the_model_folder(box: Path, cli: CLI) -> None:
    """`tokenizer.json -> ~/.ssh/id_rsa` in a downloaded folder: import-hf copied whatever the link pointed at
    into the checkpoint (and export-hf would publish it). Refused; nothing written."""
    secret = _write(box / "secret.txt")
    _link(box / "hf" / "tokenizer.json", secret, replace=True)
    before = snapshot(box)
    code, _, err = cli("import-hf", "hf", "new")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is a symlink to" in err, err
    assert snapshot(box) == before


def test_import_reads_a_hub_cache_snapshot_whose_files_link_to_its_blobs(box: Path, cli: CLI) -> None:
    """The one link out that is allowed: `hf download` without --local-dir keeps files as links into blobs/."""
    snap = box / "models--x" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (box / "models--x" / "blobs").mkdir()
    for f in (box / "hf").iterdir():
        blob = box / "models--x" / "blobs" / hashlib.sha256(f.name.encode()).hexdigest()
        shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    code, _, err = cli("import-hf", str(snap), "new")
    assert code == 0, err
    assert (box / "new" / "tokenizer.json").read_bytes() == (box / "hf" / "tokenizer.json").read_bytes()


def test_import_refuses_a_tokenizer_json_that_is_not_one(box: Path, cli: CLI) -> None:
    (box / "hf" / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    code, _, err = cli("import-hf", "hf", "new")
    assert code == 2 and "is not a Hugging Face tokenizer file" in err and not (box / "new").exists()


def test_prepare_overwrite_never_replaces_data_a_running_train_reads(box: Path, cli: CLI) -> None:
    from olmo.config import DataConfig
    from olmo.data.loader import open_source

    source = open_source([str(box / "data")], DataConfig())  # what a live `olmo train` holds while it runs
    before = snapshot(box)
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", "data", "-t", "bundled", "--shard-size", "7K",
                       "--overwrite")
    assert code == 2 and "in use by a running olmo" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(box) == before
    del source  # the run ends: the folder may be replaced now
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", "data", "-t", "bundled", "--shard-size", "7K",
                       "--overwrite")
    assert code == 0, err
    assert json.loads((box / "data" / "manifest.json").read_text())["shard_tokens"] == 7000
    assert not [p for p in box.iterdir() if p.name.startswith(".data.")]


def test_train_refuses_data_being_rewritten(box: Path) -> None:
    from olmo.config import DataConfig
    from olmo.data.loader import open_source
    from olmo.lock import hold_for_replacing, let_go

    held = hold_for_replacing(box / "data", "--output")
    try:
        with pytest.raises(OlmoError, match="being written or replaced"):
            open_source([str(box / "data")], DataConfig())
    finally:
        let_go(held)


def test_prepare_overwrite_that_fails_keeps_the_old_shards_and_resumes(box: Path, cli: CLI,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Another job with --overwrite is built beside the old one: a full disk half-way leaves the old shards as they
    were (a train can keep using them), and the rerun resumes the new job, then swaps it in."""
    import errno

    from olmo.data import prepare

    real = prepare.ShardWriter.write
    old = snapshot(box / "data")

    def write(self: prepare.ShardWriter, ids: object, docs: int) -> None:
        if self.name == "part-00003.npy":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, ids, docs)  # type: ignore[arg-type]

    monkeypatch.setattr(prepare.ShardWriter, "write", write)
    args = ("prepare-data", "-i", str(CORPUS_PATH), "-o", "data", "-t", "bundled", "--shard-size", "7K",
            "--workers", "1", "--overwrite", "-q")
    code, _, err = cli(*args)
    assert code == 2 and "no space left" in err and snapshot(box / "data") == old, err
    assert (box / ".data.prepare-new" / "part-00002.npy").is_file()  # finished shards of the new job, kept
    monkeypatch.setattr(prepare.ShardWriter, "write", real)
    code, out, err = cli(*args)
    assert code == 0 and "resumed an interrupted run" in out, err
    assert not (box / ".data.prepare-new").exists() and not [p for p in box.iterdir() if p.name.startswith(".data")]
    assert json.loads((box / "data" / "manifest.json").read_text())["shard_tokens"] == 7000


def test_a_smoke_run_kept_twice_replaces_only_its_own_run(tmp_path: Path, cli: CLI,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo.cli.gate

    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    keep = tmp_path / "keep"
    for _ in range(2):
        code, _, err = cli("train", "--smoke", "--keep", str(keep), "--steps", "4", "--device", "cpu")
        assert code == 0, err
    assert outputs.marker_of(keep / "run") == "train --smoke" and outputs.marker_of(keep / "data") == "prepare-data"
    (keep / "run" / "mine.txt").write_text("precious\n")  # the user's file in it now: no longer only the smoke run's
    before = snapshot(tmp_path)
    code, _, err = cli("train", "--smoke", "--keep", str(keep), "--steps", "4", "--device", "cpu")
    assert code == 2 and "mine.txt" in err and snapshot(tmp_path) == before


def test_a_folder_swapped_for_a_link_between_claim_and_publish(box: Path) -> None:
    """A link swapped in for the output after it was checked: publish checks again and refuses; the run the link
    points at is untouched, and the new output stays in its temp folder until discarded."""
    target = outputs.claim(box / "hf", "export-hf")
    tmp = outputs.new_temp(target)
    shutil.move(str(box / "hf"), str(box / "hf-moved"))
    (box / "hf").symlink_to(box / "run")
    before = snapshot(box / "run")
    with pytest.raises(OlmoError, match="symlink"):
        outputs.publish(target, tmp, overwrite=True)
    outputs.discard(tmp)
    assert snapshot(box / "run") == before and (box / "hf").is_symlink() and not tmp.exists()


def test_what_publish_finds_added_meanwhile_is_kept_aside(box: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A file dropped into the old output after the last check (the window between the check and the rename):
    only the command's own files are deleted; the folder is kept aside with the stranger in it, and named."""
    target = outputs.claim(box / "hf", "export-hf")
    tmp = outputs.new_temp(target)
    (tmp / "config.json").write_text("{}")
    real = outputs.hold_for_replacing

    def late(folder: Path, what: str) -> int | None:
        (folder / "late.txt").write_text("mine\n")
        return real(folder, what)

    monkeypatch.setattr(outputs, "hold_for_replacing", late)
    outputs.publish(target, tmp, overwrite=True)
    kept = [p for p in box.iterdir() if p.name.startswith(".hf.old-")]
    assert len(kept) == 1 and [p.name for p in kept[0].iterdir()] == ["late.txt"]
    assert "they are kept in" in capsys.readouterr().err
    assert (box / "hf" / "config.json").read_text() == "{}"


def test_resume_with_a_symlinked_step_tmp_is_one_line(box: Path, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run/checkpoints/step9-tmp -> elsewhere` (a checkpoint folder moved to another disk and linked, or planted):
    the resume's clean-up called rmtree on it and died with a traceback. Now one line before step 1, and the link
    and what it points at are as they were."""
    import olmo.cli.gate

    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", lambda *a: None)
    elsewhere = box / "user"
    (box / "run" / "checkpoints" / "step9-tmp").symlink_to(elsewhere)
    before = snapshot(box)
    code, out, err = cli("train", "run/config.yaml", "--resume", "--set", "steps=4", "--set", f"run_dir={box / 'run'}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "step9-tmp is a symlink" in lines[0] and "Traceback" not in out + err
    assert snapshot(box) == before


def test_a_full_disk_while_exporting_over_an_earlier_export_keeps_it(box: Path, cli: CLI,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """safetensors reports a full disk as its own error type, with the OS error only in its text."""
    import safetensors.torch

    def full(*a: object, **k: object) -> None:
        raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    before = snapshot(box)
    code, _, err = cli("export-hf", "run", "hf", "--overwrite")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("olmo: no space left on "), err
    assert snapshot(box) == before


def test_a_reader_arriving_during_an_overwrite_leaves_the_new_shards_ready(box: Path, cli: CLI,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """An `olmo train` that starts reading the old data while prepare-data --overwrite builds the new: the swap
    waits (one line saying so), the old data stays as the run reads it, and a rerun swaps the finished shards."""
    from olmo.config import DataConfig
    from olmo.data.loader import open_source

    real = outputs.publish
    readers: list[object] = []

    def publish(*a: object, **k: object) -> None:
        readers.append(open_source([str(box / "data")], DataConfig()))  # the run starts just before the swap
        real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(outputs, "publish", publish)
    old = snapshot(box / "data")
    args = ("prepare-data", "-i", str(CORPUS_PATH), "-o", "data", "-t", "bundled", "--shard-size", "7K",
            "--overwrite", "-q")
    code, _, err = cli(*args)
    assert code == 2 and "in use by a running olmo" in err and "rerun the same command" in err, err
    assert snapshot(box / "data") == old and (box / ".data.prepare-new" / "manifest.json").is_file()
    readers.clear()  # the run ends
    monkeypatch.setattr(outputs, "publish", real)
    code, _, err = cli(*args)
    assert code == 0 and json.loads((box / "data" / "manifest.json").read_text())["shard_tokens"] == 7000, err
    assert not (box / ".data.prepare-new").exists()
