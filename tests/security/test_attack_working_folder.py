"""Attacks through the working folder and the project: every command run inside a hostile folder (a cloned
repository, a download folder) with PATH naming that folder must run none of what the folder holds: no json.py
or sysconfig.py in a Python subprocess, no pip/ for `pip freeze` or the wheel install, no multiprocessing/ in
prepare-data's workers, no ./nvidia-smi (or gcc, nvcc, ldd ...) through an empty PATH entry, and none of the
project's `.olmo-doctor/env.sh` exports (LD_PRELOAD, PATH, PYTHONPATH) in fix --apply's re-check.

Each test runs the installed console scripts as a user would, in the folder, and asserts that no marker file
appeared (tests/security/_hostile.py builds the folder; its control shows the payloads do run for a plain
`python -c`). Source of the attack classes: the red-team report behind this work (json.py / sysconfig.py through
the torch probe, pip/ through `python -m pip freeze`, a trailing ':' on PATH running ./nvidia-smi, a project's
env.sh applied by the re-check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _hostile import Hostile, build, naive_python_runs_it

BIN = Path(sys.executable).parent


@pytest.fixture
def hostile(tmp_path: Path) -> Hostile:
    h = build(tmp_path)
    assert naive_python_runs_it(h) == ["json"], "the planted json.py must run for a naive `python -c`"
    return h


def run(h: Hostile, tmp_path: Path, *argv: str, leading: bool = True,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = h.env()
    if leading:  # the folder first on PATH: every tool lookup would take the planted one
        env["PATH"] = ":" + env["PATH"].rstrip(":")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # a cold torch-probe cache: the worker really starts
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env["COLUMNS"] = "200"
    return subprocess.run(argv, cwd=h.folder, env=env, capture_output=True, text=True, timeout=timeout)


def nothing_ran(h: Hostile, proc: subprocess.CompletedProcess[str]) -> None:
    assert h.ran() == [], f"planted code ran: {h.ran()}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("leading", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["leading-colon", "trailing-colon"])
def test_check_runs_nothing_from_the_folder_and_reports_the_path_entry(leading: bool, hostile: Hostile,
                                                                       tmp_path: Path) -> None:
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), "check", "--json", leading=leading)
    nothing_ran(hostile, proc)
    out = json.loads(proc.stdout)
    codes = {f["code"] for f in out["findings"]}
    assert "OD263" in codes  # the ignored PATH entry is reported
    assert out["facts"]["path.ignored_entries"] == ["(empty)"]
    assert out["facts"].get("torch.import_error") is None  # the probe worker itself still ran fine


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["check"], ["env"], ["report"], ["fix"], ["facts"]],
                         ids=lambda a: " ".join(a))
def test_doctor_commands_run_nothing_from_the_folder(argv: list[str], hostile: Hostile, tmp_path: Path) -> None:
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), *argv)
    nothing_ran(hostile, proc)
    assert proc.returncode in (0, 1), proc.stderr


@pytest.mark.slow
def test_diagnose_here_runs_nothing_from_the_folder(hostile: Hostile, tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("nvcc fatal : Unsupported gpu architecture 'compute_90'\n")
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), "diagnose", str(log), "--here")
    nothing_ran(hostile, proc)


@pytest.mark.slow
def test_fix_dry_run_shows_the_project_lines_it_will_not_apply(hostile: Hostile, tmp_path: Path) -> None:
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), "fix", "--only", "env")
    nothing_ran(hostile, proc)
    shown = " ".join(proc.stdout.split())
    assert "Not applied" in shown and "LD_PRELOAD" in shown and "PYTHONPATH" in shown
    applies = shown.split("applies these lines of .olmo-doctor/env.sh:")[1].split("Not applied")[0]
    assert "LD_PRELOAD" not in applies and "PYTHONPATH" not in applies


@pytest.mark.slow
def test_fix_apply_recheck_applies_none_of_the_projects_exports(hostile: Hostile, tmp_path: Path) -> None:
    """fix --apply writes its own block (keeping the project's lines, as it keeps any user line), then re-checks
    with only its own lines applied; --undo then runs pip (freeze) again. Nothing planted runs in either."""
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), "fix", "--apply", "--only", "env", "--json")
    nothing_ran(hostile, proc)
    out = json.loads(proc.stdout)
    assert out["status"] == "applied" and out["recheck"] is not None, out  # the re-check really ran
    env = out["recheck_env"]
    assert env["applies"] and not any(k in " ".join(env["applies"]) for k in ("LD_PRELOAD", "PYTHONPATH", "PATH="))
    assert any("LD_PRELOAD" in s for s in env["ignored"])
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), "fix", "--undo")
    nothing_ran(hostile, proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_verify_runs_nothing_from_the_folder(hostile: Hostile, tmp_path: Path) -> None:
    proc = run(hostile, tmp_path, str(BIN / "olmo-doctor"), "verify", "--steps", "4", "--device", "cpu",
               timeout=600)
    nothing_ran(hostile, proc)


@pytest.mark.slow
def test_olmo_train_runs_nothing_from_the_folder(hostile: Hostile, tmp_path: Path) -> None:
    """The smoke run with the doctor gate: the gate's check (torch probe), prepare-data, training."""
    proc = run(hostile, tmp_path, str(BIN / "olmo"), "train", "--smoke", "--steps", "4", "--device", "cpu",
               timeout=600)
    nothing_ran(hostile, proc)
    assert proc.returncode == 0, proc.stderr


def test_prepare_data_workers_run_nothing_from_the_folder(hostile: Hostile, tmp_path: Path) -> None:
    """Enough input for worker processes (forkserver or spawn): their bootstrap imports multiprocessing and json
    before any olmo code runs."""
    from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH

    src = tmp_path / "docs.jsonl"
    with open(src, "w") as f:
        for i in range(6000):
            f.write(json.dumps({"text": f"document {i} " + "the quick brown fox jumps over the lazy dog " * 8})
                    + "\n")
    assert src.stat().st_size > 2 << 20 and CORPUS_PATH.is_file()
    proc = run(hostile, tmp_path, str(BIN / "olmo"), "prepare-data", "--input", str(src), "--output",
               str(tmp_path / "shards"),
               "--tokenizer", str(TOKENIZER_PATH), "--workers", "2")
    nothing_ran(hostile, proc)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "shards" / "manifest.json").is_file()


def test_pip_of_the_wheel_cache_install_is_the_environments(hostile: Hostile, tmp_path: Path) -> None:
    """build/cache.install runs pip for a verified wheel: never the folder's pip/ (it would install anything)."""
    from olmo_doctor.build import cache

    wheel = tmp_path / "nothing-0.0.0-py3-none-any.whl"
    wheel.write_bytes(b"not a wheel")
    old = os.getcwd()
    os.chdir(hostile.folder)
    try:
        proc = cache.install(wheel, sys.executable, sha256=cache.sha256_file(wheel))
    finally:
        os.chdir(old)
    assert hostile.ran() == [], hostile.ran()
    assert proc.returncode != 0  # the real pip refused the bogus wheel: it ran, and it was the real one


@pytest.mark.slow  # ~12 s of CPU; the fast suite runs the same re-check attack through the working folder above
def test_a_projects_env_sh_alone_is_never_applied(hostile: Hostile, tmp_path: Path) -> None:
    """The project named with --project, run from elsewhere with a clean PATH: only its env.sh is hostile. Its
    PATH export names an absolute bin/ (so a re-check that applied it would run bin/nvidia-smi), its PYTHONPATH a
    json.py, its LD_PRELOAD a library that writes a marker when loaded."""
    env = hostile.env()
    env["PATH"] = env["PATH"].rstrip(":")
    env["XDG_CACHE_HOME"], env["XDG_STATE_HOME"] = str(tmp_path / "cache"), str(tmp_path / "state")
    proc = subprocess.run([str(BIN / "olmo-doctor"), "fix", "--apply", "--only", "env", "--json", "--project",
                           str(hostile.folder)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    nothing_ran(hostile, proc)
    out = json.loads(proc.stdout)
    assert out["status"] == "applied" and out["recheck"] is not None, out
    text = (hostile.folder / ".olmo-doctor" / "env.sh").read_text()
    assert "LD_PRELOAD" in text  # the project's own lines stay in its file (they are its data), unapplied
