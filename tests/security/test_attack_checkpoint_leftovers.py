"""Attacks on the clean-up of a killed checkpoint save (olmo/checkpoint_leftovers.py): a save deletes only the
exact leftovers olmo makes in `checkpoints/`, never a user's file whose name merely starts like one, and never
follows a link planted at one of those names (the call sites are reviewed in test_security_deletes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_a_symlinked_step_tmp_on_resume_is_one_line_and_not_followed(tmp_path: Path) -> None:
    from olmo import checkpoint_leftovers
    from olmo.errors import OlmoError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    root = tmp_path / "run" / "checkpoints"
    root.mkdir(parents=True)
    (root / "step9-tmp").symlink_to(elsewhere)
    with pytest.raises(OlmoError, match=r"step9-tmp is a symlink") as e:
        checkpoint_leftovers.remove_leftovers(root)
    assert "\n" not in str(e.value) and (elsewhere / "keep.txt").read_text() == "keep\n"
    assert (root / "step9-tmp").is_symlink()


def test_a_save_deletes_only_the_exact_leftovers_olmo_makes(tmp_path: Path) -> None:
    """The attack: a user's files in checkpoints/ whose names only start like a killed save's leftovers (a backup
    archive "step3-tmp.tar.gz", notes in "step1-tmp-notes/", ".latest.bak", "step7-deleting.txt"). A save must keep
    every one of them; a real leftover of a killed save (step4-tmp of plain files, .latest.XXXXXXXX.tmp) goes."""
    import torch

    from olmo import checkpoint
    from olmo.errors import OlmoError

    run = tmp_path / "run"
    root = run / "checkpoints"
    (root / "step1-tmp-notes").mkdir(parents=True)
    (root / "step1-tmp-notes" / "precious.txt").write_text("mine\n")
    mine = {"step3-tmp.tar.gz": "archive", ".latest.bak": "mine", "step7-deleting.txt": "mine",
            ".latest.tmp": "mine"}
    for name, text in mine.items():
        (root / name).write_text(text)
    (root / "step4-tmp").mkdir()
    (root / "step4-tmp" / "__0_0.distcp").write_bytes(b"half")
    (root / ".latest.ab12cd34.tmp").write_text("step")
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    checkpoint.save(run, 5, model, opt, {})
    assert (root / "step1-tmp-notes" / "precious.txt").read_text() == "mine\n"
    assert all((root / name).read_text() == text for name, text in mine.items())
    assert not (root / "step4-tmp").exists() and not (root / ".latest.ab12cd34.tmp").exists()
    # a leftover's exact name on something olmo does not leave there: refused in one line, nothing deleted
    (root / "step6-tmp").mkdir()
    (root / "step6-tmp" / "sub").mkdir()
    (root / "step6-tmp" / "sub" / "data.bin").write_bytes(b"keep")
    with pytest.raises(OlmoError, match=r"step6-tmp has the name of an unfinished olmo checkpoint") as e:
        checkpoint.save(run, 6, model, opt, {})
    assert "\n" not in str(e.value) and (root / "step6-tmp" / "sub" / "data.bin").read_bytes() == b"keep"
