"""Attacks on what `olmo` may write into or replace, by routes the owned-output tests do not take: a run_dir
lying inside a data folder, a checkpoint or an export (a run there adds checkpoints to them: the data folder then
holds files prepare-data did not write, the checkpoint folder gains a run), a run_dir `--dry-run` approves
although the real run refuses it, outputs spelled through `..` or through a symlinked parent, and prepare-data
writing into (or onto) its own input folder.

Each asserts the attack did not work: a one-line refusal (exit 2) and every file of the victim folders
byte-identical afterwards, or, where writing is allowed, the inputs byte-identical and the output not read back
as input. Source: the rule "never a folder that is, contains or lies inside a run_dir, a checkpoint or a data
folder" of the bad-input report that asked for owned outputs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _crafted import Victim

from olmo.data.corpus import TOKENIZER_PATH

Cli = Callable[..., tuple[int, str]]


def snapshot(root: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(root)): (str(p.readlink()) if p.is_symlink() else p.read_bytes() if p.is_file()
                                       else "dir") for p in sorted(root.rglob("*"))}


def refused(code: int, err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("olmo: ") and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]


@pytest.fixture
def box(victim: Victim, tmp_path: Path) -> Path:
    shutil.copytree(victim.data, tmp_path / "data")
    victim.copy(tmp_path / "run")
    return tmp_path


def _hf(box: Path) -> Path:
    from olmo.interop.hf import export_hf

    return export_hf(box / "run" / "checkpoints" / "step2", box / "hf", tokenizer=TOKENIZER_PATH)


RUN_DIRS = [
    ("inside-a-data-folder", lambda b: b / "data" / "run", "lies inside the output of `olmo prepare-data`"),
    ("deep-inside-a-data-folder", lambda b: b / "data" / "a" / "b", "lies inside the output of `olmo prepare-data`"),
    ("inside-a-checkpoint", lambda b: b / "run" / "checkpoints" / "step2" / "ft", "lies inside a checkpoint"),
    ("inside-an-export", lambda b: _hf(b) / "ft", "lies inside the output of `olmo export-hf`"),
    ("through-a-linked-parent", lambda b: _link(b / "link", b / "data") / "run", "lies inside"),
]


def _link(at: Path, to: Path) -> Path:
    at.symlink_to(to)
    return at


@pytest.mark.parametrize(("make", "words"), [(m, w) for _, m, w in RUN_DIRS], ids=[i for i, _, _ in RUN_DIRS])
def test_a_run_dir_inside_what_another_command_made_is_refused(make: Callable[[Path], Path], words: str,
                                                               victim: Victim, box: Path, olmo_cli: Cli) -> None:
    run_dir = make(box)
    recipe = victim.recipe(box, run_dir, steps=1)
    recipe.write_text(recipe.read_text().replace(str(victim.data), str(box / "data")))
    before = snapshot(box)
    code, err = olmo_cli("train", str(recipe), "--skip-doctor")
    refused(code, err, words)
    assert snapshot(box) == before


@pytest.mark.parametrize("where", ["data", "run/checkpoints/step2", "data/run"])
def test_dry_run_refuses_the_run_dir_the_real_run_refuses(where: str, victim: Victim, box: Path,
                                                          olmo_cli: Cli) -> None:
    recipe = victim.recipe(box, box / where, steps=1)
    before = snapshot(box)
    code, err = olmo_cli("train", str(recipe), "--dry-run")
    refused(code, err, "run_dir")
    assert snapshot(box) == before


def test_export_over_a_run_spelled_through_dotdot_is_refused(box: Path, olmo_cli: Cli) -> None:
    before = snapshot(box)
    code, err = olmo_cli("export-hf", str(box / "run" / "checkpoints" / "step2"),
                         str(box / "run" / "checkpoints" / ".."), "--overwrite")
    refused(code, err, "run_dir")
    assert snapshot(box) == before


def test_import_into_a_data_folder_through_a_linked_parent_is_refused(box: Path, olmo_cli: Cli) -> None:
    hf = _hf(box)
    (box / "link").symlink_to(box / "data")
    before = snapshot(box)
    code, err = olmo_cli("import-hf", str(hf), str(box / "link" / "ck"))
    refused(code, err, "lies inside")
    assert snapshot(box) == before


def test_prepare_onto_its_own_input_folder_is_refused(tmp_path: Path, olmo_cli: Cli) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.jsonl").write_text('{"text": "hello world, a document of mine"}\n' * 50)
    before = snapshot(tmp_path)
    code, err = olmo_cli("prepare-data", "-i", str(docs), "-o", str(docs), "-t", "bundled", "--overwrite")
    refused(code, err, "prepare-data did not write it")
    assert snapshot(tmp_path) == before


def test_prepare_into_its_input_folder_twice_never_reads_its_own_shards(tmp_path: Path, olmo_cli: Cli) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.jsonl").write_text('{"text": "hello world, a document of mine"}\n' * 50)
    mine = (docs / "a.jsonl").read_bytes()
    for extra in ((), ("--overwrite",)):
        code, err = olmo_cli("prepare-data", "-i", str(docs), "-o", str(docs / "tokens"), "-t", "bundled", *extra)
        assert code == 0, err
    job = json.loads((docs / "tokens" / "prepare.json").read_text())
    assert (docs / "a.jsonl").read_bytes() == mine
    assert [Path(i["path"]).name for i in job["inputs"]] == ["a.jsonl"], "its own output was read as input"
