"""A full disk during `fix --apply` (issue #12): whatever was written is put back, the journal ends rolled back
(or, when even the journal cannot be written, holds nothing left to undo), and `fix --undo` is then clean.

ENOSPC is simulated by monkeypatching os.write (atomic_write writes through it) for chosen files."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.envplan import EnvVar
from olmo_doctor.errors import UsageError
from olmo_doctor.fix import execute
from olmo_doctor.fix.envfile import ENV_FILE
from olmo_doctor.fix.journal import Journal
from olmo_doctor.fix.plan import FixPlan, make_plan

USER_TEXT = "# my own line\nexport MINE=1\n"


def plan_for(project: Path) -> FixPlan:
    env_file = project / ENV_FILE
    text = env_file.read_text() if env_file.exists() else None
    return make_plan([], {"MAX_JOBS": EnvVar("4", "test"), "NVCC_THREADS": EnvVar("1", "test")}, {},
                     project=str(project), env=None, env_text=text)


def full_disk(monkeypatch: pytest.MonkeyPatch, hit: Callable[[str], bool]) -> list[str]:
    """os.write raises ENOSPC for files whose path `hit` selects; returns the paths that failed."""
    real = os.write
    failed: list[str] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if hit(name):
            failed.append(name)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    return failed


def undo_line(project: Path) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["fix", "--undo", "--project", str(project)])
    if isinstance(res.exception, UsageError):
        return 2, str(res.exception)
    return res.exit_code, res.stdout


def _project(tmp_path: Path, existing: str | None) -> Path:
    """A project folder, with the user's own env.sh when `existing` is given."""
    project = tmp_path / "p"
    (project / ".olmo-doctor").mkdir(parents=True)
    if existing is not None:
        (project / ENV_FILE).write_text(existing)
    return project


def snapshot(project: Path) -> dict[str, bytes]:
    """Every file outside the journal, by path: what a rollback must leave exactly as it was."""
    return {str(p.relative_to(project)): p.read_bytes() for p in project.rglob("*")
            if p.is_file() and "journal" not in p.parts}


@pytest.mark.parametrize("existing", [None, USER_TEXT])
def test_env_file_write_fails_and_the_run_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     existing: str | None) -> None:
    project = _project(tmp_path, existing)
    before = snapshot(project)
    plan = plan_for(project)
    with monkeypatch.context() as mp:  # (monkeypatch.undo() would also drop conftest's isolated HOME dirs)
        failed = full_disk(mp, lambda name: ".env.sh." in name)
        entry = execute.apply_plan(plan, project, ["test"])
    assert failed, "the simulated full disk was never hit"
    assert entry.status == "rolled_back" and "no space left" in entry.data["error"]
    assert snapshot(project) == before
    assert not list((project / ".olmo-doctor").glob(".env.sh.*"))  # no temp file left behind
    assert Journal(project).load(entry.id).status == "rolled_back"
    code, line = undo_line(project)
    assert code == 2 and "nothing to undo" in line
    assert snapshot(project) == before
    # and the next run is not blocked by a half-finished entry
    assert execute.apply_plan(plan_for(project), project, ["test"]).status == "applied"


@pytest.mark.parametrize("existing", [None, USER_TEXT])
def test_disk_fills_after_the_env_file_was_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   existing: str | None) -> None:
    """env.sh is written, then the journal cannot record it: env.sh is put back all the same."""
    project = _project(tmp_path, existing)
    before = snapshot(project)
    plan = plan_for(project)
    real_write = execute.atomic_write
    state = {"env_written": False}

    with monkeypatch.context() as mp:

        def tracking(path: Path, data: bytes, mode: int | None = None) -> None:
            if path.name == "env.sh" and not state["env_written"]:
                real_write(path, data, mode)
                state["env_written"] = True  # from now on the disk is full, for every file
                full_disk(mp, lambda name: True)
                return
            real_write(path, data, mode)

        mp.setattr(execute, "atomic_write", tracking)
        entry = execute.apply_plan(plan, project, ["test"])
    assert state["env_written"]
    assert entry.status == "rolled_back", entry.data
    assert snapshot(project) == before
    code, line = undo_line(project)  # the entry is gone or rolled back: either way nothing to undo
    assert code == 2 and ("nothing to undo" in line or "no fix journal" in line), line
    assert snapshot(project) == before
    assert execute.apply_plan(plan_for(project), project, ["test"]).status == "applied"


def test_no_room_for_the_journal_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "p"
    (project / ".olmo-doctor").mkdir(parents=True)
    (project / ENV_FILE).write_text(USER_TEXT)
    before = snapshot(project)
    plan = plan_for(project)
    with monkeypatch.context() as mp, pytest.raises(UsageError, match=r"(?i)no space left"):
        full_disk(mp, lambda name: "manifest.json" in name)
        execute.apply_plan(plan, project, ["test"])
    assert snapshot(project) == before
    assert Journal(project).ids() == []  # no half entry that would block the next run
    assert execute.apply_plan(plan_for(project), project, ["test"]).status == "applied"


def test_an_unusable_journal_key_refuses_before_anything_is_written(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "p"
    (project / ".olmo-doctor").mkdir(parents=True)
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))  # the key's folder cannot be created
    with pytest.raises(UsageError, match="journal key"):
        execute.apply_plan(plan_for(project), project, ["test"])
    assert not (project / ENV_FILE).exists() and Journal(project).ids() == []
