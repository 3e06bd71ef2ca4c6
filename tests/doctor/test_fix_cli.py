"""Refusals (read-only project, no venv, tampered journal, edits since the fix, undo order), the text output,
and the one-line exit-2 contract through the real entry point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _fix_sandbox import Sandbox, cli, pip_dir_fixture, sandbox_fixture  # noqa: F401 (fixtures)

from olmo_doctor.fix.envfile import ENV_FILE
from tests.machines import H200_CAPTURE


def journal_ids(sb: Sandbox) -> list[str]:
    folder = sb.project / ".olmo-doctor" / "journal"
    return sorted(p.name for p in folder.glob("0*")) if folder.exists() else []


def make_read_only(path: Path) -> None:
    """Read-only for real: chmod for a normal user, the immutable flag for root (root ignores permissions)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr +i: cannot make a directory read-only here")


def make_writable(path: Path) -> None:
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o755)


@pytest.mark.slow
def test_read_only_project_is_refused_and_nothing_changes(sandbox: Sandbox) -> None:
    freeze = sandbox.freeze()
    make_read_only(sandbox.project)
    try:
        code, line = cli("fix", "--apply", "--only", "OD901,OD902")
    finally:
        make_writable(sandbox.project)
    assert code == 2 and "not writable" in line and "--project DIR" in line
    assert list(sandbox.project.iterdir()) == [] and sandbox.freeze() == freeze


def test_project_option_picks_another_dir(sandbox: Sandbox, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    code, _ = cli("fix", "--apply", "--only", "OD901", "--project", str(other))
    assert code == 1  # applied; other error findings remain
    assert (other / ENV_FILE).exists() and not (sandbox.project / ".olmo-doctor").exists()
    assert cli("fix", "--undo", "--project", str(other))[0] == 0 and not (other / ENV_FILE).exists()


def test_no_venv_refuses_pip_fixes(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    monkeypatch.delenv("VIRTUAL_ENV")
    monkeypatch.setattr(sys, "executable", str(base))
    for wheel in sandbox.wheels.iterdir():
        wheel.unlink()  # belt and braces: even a buggy refusal could not install anything into the base Python
    dry = json.loads(cli("fix", "--json", "--only", "OD901,OD902")[1])
    assert dry["environment"] == "system"
    assert {i["status"] for i in dry["items"]} == {"apply", "needs_venv"}
    code, line = cli("fix", "--apply", "--only", "OD901,OD902")
    assert code == 2 and line.startswith("olmo-doctor: no virtual environment:") and "--unsafe-fixes" in line
    assert not (sandbox.project / ".olmo-doctor").exists()  # the safe env file was not written either


def test_another_activated_venv_is_refused(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "elsewhere"))
    code, line = cli("fix", "--apply", "--unsafe-fixes", "--only", "OD902")
    assert code == 2 and "the active venv is" in line and "tinypkg==1.0" not in sandbox.freeze()


def test_from_report_plans_for_that_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Real rules and the real env plan on the captured H200: arch 90 only, nothing written here."""
    monkeypatch.chdir(tmp_path)
    code, out = cli("fix", "--json", "--from-report", str(H200_CAPTURE))
    data = json.loads(out)
    assert code == 0  # the H200 capture has no error finding
    env_item = next(i for i in data["items"] if i["op"] == "write_env_file")
    assert "export TORCH_CUDA_ARCH_LIST=9.0\n" in env_item["content"]
    assert "export FLASH_ATTN_CUDA_ARCHS=90\n" in env_item["content"]
    assert data["from_report"] == str(H200_CAPTURE) and data["environment"] is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_tampered_journal_is_refused(sandbox: Sandbox) -> None:
    assert cli("fix", "--apply", "--only", "OD901")[0] == 1
    [entry] = journal_ids(sandbox)
    manifest = sandbox.project / ".olmo-doctor" / "journal" / entry / "manifest.json"
    good = manifest.read_text()
    env_before = (sandbox.project / ENV_FILE).read_bytes()
    manifest.write_text(good.replace('"status": "applied"', '"status": "in_progress"'))
    code, line = cli("fix", "--undo")
    assert code == 2 and "edited after it was written" in line
    code, line = cli("fix", "--apply", "--only", "OD902")
    assert code == 2 and "edited after it was written" in line
    assert (sandbox.project / ENV_FILE).read_bytes() == env_before and "tinypkg==1.0" not in sandbox.freeze()
    # a backup edited behind the manifest's back is caught too
    manifest.write_text(good)
    (sandbox.project / ENV_FILE).write_text("# user file\n")
    second = cli("fix", "--apply", "--only", "OD901")
    assert second[0] == 1
    backup = next((sandbox.project / ".olmo-doctor" / "journal").glob("0002-*/files/0"))
    backup.write_bytes(b"# not what was there\n")
    code, line = cli("fix", "--undo")
    assert code == 2 and "files/0 is missing or changed" in line


def test_undo_refuses_to_overwrite_later_edits(sandbox: Sandbox) -> None:
    assert cli("fix", "--apply", "--only", "OD901")[0] == 1
    env_path = sandbox.project / ENV_FILE
    env_path.write_text(env_path.read_text() + "export MINE=1\n")
    code, line = cli("fix", "--undo")
    assert code == 2 and "changed after fix" in line and "MINE=1" in env_path.read_text()


@pytest.mark.slow
def test_undo_goes_newest_first(sandbox: Sandbox) -> None:
    assert cli("fix", "--apply", "--only", "OD901")[0] == 1
    assert cli("fix", "--apply", "--only", "OD902")[0] == 0  # the re-check sources env.sh: no error left
    first, second = journal_ids(sandbox)
    code, line = cli("fix", "--undo", first)
    assert code == 2 and f"{second} is newer and still applied" in line
    assert cli("fix", "--undo")[0] == 0  # the latest: the pip install
    assert "tinypkg==1.0" not in sandbox.freeze()
    assert cli("fix", "--undo", "1")[0] == 0 and not (sandbox.project / ENV_FILE).exists()
    history = json.loads(cli("fix", "--history", "--json")[1])["entries"]
    assert [e["status"] for e in history] == ["undone", "undone"]


def test_text_dry_run_shows_grades_commands_and_hint(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    sandbox.state.update({"test.manual": True})
    sandbox.install("torch", "2.11.0+cu130")
    code, out = cli("fix", "--only", "OD901,OD902,OD907,OD908")
    assert code == 1  # error findings are present
    assert "safe" in out and "unsafe" in out and "manual" in out and "held back" in out
    assert "+export OLMO_FIX_HOME='/opt/cuda test'" in out
    assert "-I -m pip install --no-input --disable-pip-version-check tinypkg==1.0" in out
    assert "$ echo test-manual" in out and "olmo-doctor fix --apply" in out
    assert not (sandbox.project / ".olmo-doctor").exists()  # a dry run writes nothing


def test_bad_flags_are_one_line_usage_errors(sandbox: Sandbox) -> None:
    assert cli("fix", "0001")[0] == 2
    assert cli("fix", "--undo", "--apply")[0] == 2
    code, line = cli("fix", "--only", "ninja")
    assert code == 2 and "rule codes like OD204" in line
    code, line = cli("fix", "--apply", "--from-report", "x.txt")
    assert code == 2 and "dry run" in line
    code, line = cli("fix", "--undo")
    assert code == 2 and "nothing to undo" in line


def test_entry_point_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """Through `python -m olmo_doctor` (the real main): a tampered journal is one stderr line, exit 2."""
    folder = tmp_path / ".olmo-doctor" / "journal" / "0001-20260101-000000"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"format": 1, "sha256": "0" * 64, "entry": {"id": "x"}}))
    proc = subprocess.run([sys.executable, "-m", "olmo_doctor", "fix", "--undo", "--project", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "checksum mismatch" in proc.stderr
