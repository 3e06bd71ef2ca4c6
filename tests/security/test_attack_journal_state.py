"""Attacks on the fix journal and the doctor's state at the file-descriptor level: a `.olmo-doctor` swapped for a
symlink after the checks (the writes must not follow it), a hard-linked env.sh (its other name's secrets must
not be copied into the journal), a signed entry copied from project A into project B (refused in B), a journal
key folder that others can write or that is a symlink (refused, never used silently), and symlinked wheel-cache
folders (refused, never followed). Each test asserts the attack did not work: the outside folder or file is
byte-for-byte unchanged, no secret appears in the journal, nothing is undone in the wrong project.

Sources: the red-team report behind this work (TOCTOU on .olmo-doctor, hard-linked env.sh, cross-project undo,
a world-writable state folder, a symlinked wheel-cache folder); CWE-367 and CWE-59 for the classes.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.errors import UsageError
from olmo_doctor.fix import journal_key
from olmo_doctor.fix.journal import Entry, Journal

SECRET = b"AWS_SECRET_ACCESS_KEY=do-not-copy-me\n"
USER_LINES = b"# my own line\nexport MY_VAR=1\n"


def fix(project: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["fix", *args, "--project", str(project)])
    if isinstance(res.exception, UsageError):
        return 2, str(res.exception)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (links not followed): to show nothing was written there."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root) / name
            out[str(path.relative_to(folder))] = path.read_bytes() if path.is_file() else b"<link>"
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "project"
    (p / ".olmo-doctor").mkdir(parents=True)
    (p / ".olmo-doctor" / "env.sh").write_bytes(USER_LINES)
    return p


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    o.mkdir()
    (o / "env.sh").write_bytes(b"# someone else's file\n")
    (o / "keep.txt").write_bytes(b"keep\n")
    return o


def swap(project: Path, outside: Path) -> dict[str, bytes]:
    """Move the real .olmo-doctor away and put a symlink at its name to `outside/mirror`, a copy of it made now
    (so every folder a write expects, the new journal entry's included, exists behind the link). Returns the
    mirror's files as they are at the swap: the test asserts they stay so."""
    state = project / ".olmo-doctor"
    if state.is_symlink():
        return tree(outside)
    shutil.copytree(state, outside / "mirror", symlinks=True)
    state.rename(project / ".olmo-doctor.moved")
    state.symlink_to(outside / "mirror")
    return tree(outside)


@pytest.mark.parametrize("when", ["after-checks", "before-lock", "before-backup", "before-write"])
def test_a_state_folder_swapped_mid_run_does_not_redirect_writes(when: str, project: Path, outside: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo_doctor.fix.execute as ex

    target: tuple[Any, str] = {"after-checks": (ex, "preflight"), "before-lock": (Journal, "lock"),
                               "before-backup": (Entry, "back_up_file"), "before-write": (ex, "atomic_write")}[when]
    original = getattr(*target)
    at_swap: dict[str, bytes] = {}

    def swapped(*args: Any, **kwargs: Any) -> Any:
        if when == "after-checks":
            result = original(*args, **kwargs)
            at_swap.update(swap(project, outside))
            return result
        at_swap.update(swap(project, outside))
        return original(*args, **kwargs)

    monkeypatch.setattr(*target, swapped)
    code, out = fix(project, "--apply", "--only", "env")
    assert at_swap, "the swap never happened"
    assert tree(outside) == at_swap, "a write followed the swapped-in symlink"
    assert code in (0, 1, 2) and "Traceback" not in out
    if code == 2:
        assert len(out.splitlines()) == 1  # refused in one line
    else:  # it finished in the folder it checked (now renamed), which holds the journal and the new env.sh
        moved = project / ".olmo-doctor.moved"
        assert (moved / "journal").is_dir() and b"MY_VAR" in (moved / "env.sh").read_bytes()


def test_a_hard_linked_env_sh_is_refused_and_never_copied(project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "credentials"
    secret.write_bytes(SECRET)
    env = project / ".olmo-doctor" / "env.sh"
    env.unlink()
    os.link(secret, env)
    for args in (["--apply", "--only", "env"], ["--only", "env"]):
        code, out = fix(project, *args)
        assert code == 2 and "hard-linked" in out, out
    assert secret.read_bytes() == SECRET
    journal = project / ".olmo-doctor" / "journal"
    copied = [p for p in journal.rglob("*") if p.is_file() and SECRET in p.read_bytes()] if journal.exists() else []
    assert copied == []


@pytest.mark.slow
def test_a_signed_entry_from_project_a_is_refused_in_project_b(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for p in (a, b):
        (p / ".olmo-doctor").mkdir(parents=True)
        (p / ".olmo-doctor" / "env.sh").write_bytes(USER_LINES)
    code, out = fix(a, "--apply", "--only", "env")
    assert code in (0, 1), out
    written = (a / ".olmo-doctor" / "env.sh").read_bytes()
    # B looks exactly like A after the run: the same journal (signed by this user), the same env.sh
    shutil.copytree(a / ".olmo-doctor" / "journal", b / ".olmo-doctor" / "journal")
    (b / ".olmo-doctor" / "env.sh").write_bytes(written)
    code, out = fix(b, "--undo")
    assert code == 2 and "written for" in out and str(a) in out, out
    assert (b / ".olmo-doctor" / "env.sh").read_bytes() == written  # nothing undone in B
    code, out = fix(a, "--undo")  # the control: in A it undoes
    assert code == 0, out
    assert (a / ".olmo-doctor" / "env.sh").read_bytes() == USER_LINES


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "symlink", "other-owner"])
def test_a_key_folder_others_can_change_is_refused(how: str, project: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    folder = journal_key.key_path().parent
    if how == "symlink":
        real = tmp_path / "shared-keys"
        real.mkdir(mode=0o700)
        state.mkdir()
        folder.symlink_to(real)
    else:
        folder.mkdir(parents=True)
        if how == "other-owner":
            if os.getuid() != 0:
                pytest.skip("giving a folder to another user needs root")
            os.chown(folder, 12345, 12345)
        else:
            folder.chmod(0o777 if how == "world-writable" else 0o770)
    env_before = (project / ".olmo-doctor" / "env.sh").read_bytes()
    code, out = fix(project, "--apply", "--only", "env")
    assert code == 2 and "journal key folder" in out and len(out.splitlines()) == 1, out
    assert not (project / ".olmo-doctor" / "journal").exists() or not any(
        (project / ".olmo-doctor" / "journal").iterdir())
    assert (project / ".olmo-doctor" / "env.sh").read_bytes() == env_before
    target = tmp_path / "shared-keys" if how == "symlink" else folder
    assert not (target / "journal.key").exists()  # no key made or used there


def test_symlinked_wheel_cache_folders_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from olmo_doctor.build import cache

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    plan: Any = SimpleNamespace(package="flash-attn", cache_digest="abc123", cache_key={"k": 1})
    wheel = tmp_path / "flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel bytes")
    elsewhere = tmp_path / "elsewhere"
    real_root = tmp_path / "real-root"
    stored = cache.store(plan, wheel, root=real_root)  # a genuine, signed entry
    assert cache.find(plan, real_root)[0] == stored  # the control: found when the folders are real
    for link_at in ("root", "package", "entry"):
        root = tmp_path / f"cache-{link_at}"
        if link_at == "root":
            root.symlink_to(real_root)
        else:
            (root / "flash-attn").mkdir(parents=True)
            if link_at == "package":
                (root / "flash-attn").rmdir()
                (root / "flash-attn").symlink_to(real_root / "flash-attn")
            else:
                (root / "flash-attn" / "abc123").symlink_to(real_root / "flash-attn" / "abc123")
        found, why = cache.find(plan, root)
        assert found is None and why is not None and "symlink" in why, (link_at, why)
        assert cache.recorded_sha256(root / "flash-attn" / "abc123" / wheel.name) is None
    elsewhere.mkdir()
    linked = tmp_path / "linked-root"
    linked.symlink_to(elsewhere)
    with pytest.raises(UsageError, match="symlink"):
        cache.store(plan, wheel, root=linked)
    assert list(elsewhere.iterdir()) == []  # nothing written through the link


def test_history_marks_another_projects_entry_as_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for p in (a, b):
        (p / ".olmo-doctor").mkdir(parents=True)
    assert fix(a, "--apply", "--only", "env")[0] in (0, 1)
    shutil.copytree(a / ".olmo-doctor" / "journal", b / ".olmo-doctor" / "journal")
    res = CliRunner().invoke(app, ["fix", "--history", "--json", "--project", str(b)])
    rows = json.loads(res.stdout)["entries"]
    assert rows and all(r["status"] == "tampered" and "written for" in r["summary"] for r in rows)
