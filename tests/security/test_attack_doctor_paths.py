"""Attacks on what olmo-doctor writes and where it reads: `report -o` onto a file the user wrote, a symlink or a
folder (it must replace only its own earlier report, never what it did not create), and URLs given where a file
goes (`diagnose https://.../build.log`, `check --from-report https://gist...`, `compare s3://...`,
`build-kernels --source https://github.com/...`, `report -o s3://...`): pathlib turns each into a relative
`https:/...` path, so before they were read or written as local folders named `https:` or `s3:` and the error
named a path the user never typed. Each must be one line, exit 2, the user's files byte-identical.

Source: the `-o FILE` habit of curl/wget (a typo'd `-o ~/.bashrc`), and the URL-as-path class of the bad-input
report that asked for this work (`run_dir=s3://bucket/run` writing `./s3:/bucket/run`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DOCTOR = str(Path(sys.executable).parent / "olmo-doctor")


def _doctor(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "COLUMNS": "300"}
    return subprocess.run([DOCTOR, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _one_line_usage_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("olmo-doctor: "), proc.stderr
    assert all(w in lines[0] for w in words), lines[0]


def _snapshot(root: Path) -> dict[str, object]:
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir")
            for p in sorted(root.rglob("*")) if "cache" not in p.parts and "state" not in p.parts}


URLS = [
    ("diagnose", ["diagnose", "https://ci.example.org/job/1/build.log"]),
    ("check-from-report", ["check", "--from-report", "https://gist.example.com/u/collect_env.txt"]),
    ("env-from-report", ["env", "--from-report=s3://bucket/report.json"]),
    ("compare", ["compare", "s3://bucket/node1.json", "s3://bucket/node2.json"]),
    ("build-kernels-source", ["build-kernels", "--source", "https://github.com/Dao-AILab/flash-attention",
                              "--dry-run"]),
    ("report-output", ["report", "-o", "s3://bucket/report.json"]),
    ("diagnose-report", ["diagnose", "build.log", "--report", "file:///tmp/collect_env.txt"]),
]


@pytest.mark.parametrize("argv", [a for _, a in URLS], ids=[i for i, _ in URLS])
def test_a_url_where_a_file_goes_is_named_as_one(argv: list[str], tmp_path: Path) -> None:
    (tmp_path / "build.log").write_text("RuntimeError: CUDA error: no kernel image is available\n")
    (tmp_path / "s3:").mkdir()  # a folder pathlib's spelling of the URL would land in
    before = _snapshot(tmp_path)
    proc = _doctor(tmp_path, *argv)
    _one_line_usage_error(proc, "is a URL", "://")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["users-file", "symlink", "folder", "someone-elses-json"])
def test_report_output_never_replaces_what_report_did_not_write(kind: str, tmp_path: Path) -> None:
    target = tmp_path / "notes.txt"
    target.write_text("my notes\n")
    out = {"users-file": target, "symlink": tmp_path / "link.json", "folder": tmp_path / "folder",
           "someone-elses-json": tmp_path / "other.json"}[kind]
    if kind == "symlink":
        out.symlink_to(target)
    elif kind == "folder":
        out.mkdir()
        (out / "kept.txt").write_text("mine\n")
    elif kind == "someone-elses-json":
        out.write_text(json.dumps({"facts": {}, "findings": []}))  # report-like, but not olmo-doctor's
    before = _snapshot(tmp_path)
    proc = _doctor(tmp_path, "report", "-o", str(out))
    _one_line_usage_error(proc, str(out), "already exists")
    assert _snapshot(tmp_path) == before


@pytest.mark.slow
def test_report_output_replaces_its_own_earlier_report(tmp_path: Path) -> None:
    """The control: a second `report -o` onto the first one's file replaces it."""
    out = tmp_path / "r.json"
    assert _doctor(tmp_path, "report", "-o", str(out)).returncode == 0
    out.write_text(out.read_text().replace('"olmo_doctor_version"', '"stale": 1, "olmo_doctor_version"'))
    proc = _doctor(tmp_path, "report", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert '"stale"' not in out.read_text()


def _marking_tools(folder: Path) -> list[str]:
    folder.mkdir()
    for name in ("python", "python3", "nvcc", "gcc", "g++", "ninja"):
        (folder / name).write_text(f"#!/bin/sh\necho ran >> '{folder}/MARK-{name}'\nexit 0\n")
        (folder / name).chmod(0o755)
    return sorted(p.name for p in folder.glob("MARK-*"))


@pytest.fixture(scope="module")
def own_report() -> dict[str, object]:
    """An olmo-doctor report of an 8-GPU H100 node (a shipped fixture), so the build plans go all the way."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "fleet" / "node0.json"
    return dict(json.loads(fixture.read_text()))


FROM_REPORT = [["build-kernels", "--from-report", "R", "--dry-run"], ["build-kernels", "--from-report", "R", "--json"],
               ["check", "--from-report", "R", "--deep"], ["env", "--from-report", "R"],
               ["diagnose", "build.log", "--report", "R"], ["fix", "--from-report", "R"]]


@pytest.mark.parametrize("argv", FROM_REPORT, ids=["-".join(a[:1] + a[3:]).replace("--", "") for a in FROM_REPORT])
def test_programs_a_report_names_are_never_run(argv: list[str], own_report: dict[str, object],
                                               tmp_path: Path) -> None:
    """A report is data from another machine: its python.executable, nvcc.path, gcc.path, ninja.path, cuda.home
    and torch.path must never become programs this machine runs."""
    evil = tmp_path / "evil"
    _marking_tools(evil)
    (evil / "bin").symlink_to(evil)  # cuda.home/bin/nvcc
    report = json.loads(json.dumps(own_report))
    report["facts"].update({"python.executable": f"{evil}/python", "nvcc.path": f"{evil}/nvcc",
                            "gcc.path": f"{evil}/gcc", "ninja.path": f"{evil}/ninja", "cuda.home": str(evil),
                            "cuda.toolkit_root": str(evil), "torch.path": str(evil)})
    (tmp_path / "r.json").write_text(json.dumps(report))
    (tmp_path / "build.log").write_text("nvcc fatal   : Unsupported gpu architecture 'compute_90'\n")
    proc = _doctor(tmp_path, *[str(tmp_path / "r.json") if a == "R" else a for a in argv])
    assert sorted(p.name for p in evil.glob("MARK-*")) == [], proc.stdout[-1500:]
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_build_kernels_dry_run_runs_nothing_of_a_source_tree(tmp_path: Path) -> None:
    """A cloned flash-attention whose setup.py and in-tree PEP 517 backend (pyproject's backend-path) write a
    marker: planning a build (--dry-run) reads the tree and runs none of it."""
    src = tmp_path / "flash-attention"
    (src / "flash_attn").mkdir(parents=True)
    (src / "csrc" / "cutlass" / "include" / "cutlass").mkdir(parents=True)
    (src / "csrc" / "cutlass" / "include" / "cutlass" / "cutlass.h").write_text("")
    (src / "flash_attn" / "__init__.py").write_text('__version__ = "2.8.3"\n')
    code = f"open({str(tmp_path / 'MARK')!r}, 'a').write('ran')\n"
    (src / "setup.py").write_text(code)
    (src / "backend.py").write_text(code)
    (src / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                                        'backend-path = ["."]\n')
    proc = _doctor(tmp_path, "build-kernels", "--source", str(src), "--dry-run")
    assert not (tmp_path / "MARK").exists(), proc.stdout[-1500:]
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 1, 2), proc.stderr
