"""Text that no encoding can print: lone surrogates in a report's values (JSON can spell "\\udcff"), bytes that
are not UTF-8 in this machine's environment variables (Python reads them as lone surrogates), and a project
folder whose name holds a \\xff byte. On a terminal whose encoding is strict (any UTF-8 locale but C/POSIX;
PYTHONIOENCODING=utf-8:strict here) `check`, `env`, `fix` (dry run, --apply, --history, --undo), `report` and
`diagnose --here` must give correct output or one line, never a UnicodeEncodeError traceback.

Source of the cases: the red-team report behind this work (UnicodeEncodeError in env, check and fix; a project
folder named with a \\xff byte).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SURROGATE = "\udcff"
_CACHE: list[str] = []  # one torch-probe cache for the module: the worker's answer is the same every time


def doctor(cwd: Path, tmp_path: Path, *argv: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ if env is None else env)
    if not _CACHE:
        _CACHE.append(str(tmp_path / "cache"))
    full.update(PYTHONIOENCODING="utf-8:strict", XDG_STATE_HOME=str(tmp_path / "state"),
                XDG_CACHE_HOME=_CACHE[0], COLUMNS="200")
    return subprocess.run([str(BIN / "olmo-doctor"), *argv], cwd=cwd, env=full, capture_output=True,
                          timeout=300)  # bytes: the output itself may hold any byte


def no_traceback(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in proc.stderr and b"UnicodeEncodeError" not in proc.stderr, err[-3000:]
    assert proc.returncode in (0, 1, 2), err
    if proc.returncode == 2:
        assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
    return proc.stdout.decode("utf-8", "replace") + err


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This machine's saved report, with lone surrogates put into free-text values a probe can carry."""
    tmp = tmp_path_factory.mktemp("surrogates")
    proc = doctor(tmp, tmp, "report", "-o", str(tmp / "report.json"))
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads((tmp / "report.json").read_text())
    facts = data["facts"]
    facts.update({"gpu.count": 1, "gpu.0.name": f"NVIDIA H200{SURROGATE}", "gpu.0.compute_capability": "9.0",
                  "cuda.home": f"/usr/local/cuda{SURROGATE}", "env.LD_LIBRARY_PATH": f"/opt/{SURROGATE}lib",
                  "env.CUDA_VISIBLE_DEVICES": f"0{SURROGATE}", "python.executable": f"/venv{SURROGATE}/python",
                  "olmo.module_origin": f"olmo-doctor{SURROGATE}"})
    path = tmp / "surrogates.json"
    path.write_text(json.dumps(data))  # json escapes them as \udcff: valid JSON, lone surrogates when read
    assert "\\udcff" in path.read_text()
    return path


SLOW = pytest.mark.slow


@pytest.mark.parametrize("argv", [["check"], pytest.param(["check", "-v"], marks=SLOW),
                                  pytest.param(["check", "--json"], marks=SLOW), pytest.param(["env"], marks=SLOW),
                                  ["env", "--format", "fish"], pytest.param(["env", "--format", "dotenv"], marks=SLOW),
                                  ["fix"], pytest.param(["fix", "--json"], marks=SLOW)], ids=lambda a: " ".join(a))
def test_lone_surrogates_in_a_report(argv: list[str], report: Path, tmp_path: Path) -> None:
    out = no_traceback(doctor(tmp_path, tmp_path, *argv, "--from-report", str(report)))
    assert "/usr/local/cuda\udcff" not in out  # never printed raw


@pytest.mark.parametrize("argv", [["check"], pytest.param(["env"], marks=SLOW), pytest.param(["fix"], marks=SLOW),
                                  pytest.param(["report"], marks=SLOW)], ids=lambda a: " ".join(a))
def test_undecodable_environment_values(argv: list[str], tmp_path: Path) -> None:
    env = dict(os.environ)  # str values with lone surrogates reach the child as the raw bytes (os.fsencode)
    env.update(CUDA_HOME=f"/usr/local/cuda{SURROGATE}", LD_LIBRARY_PATH=f"/opt/{SURROGATE}",
               TORCH_CUDA_ARCH_LIST=f"9.0{SURROGATE}", NCCL_SOCKET_IFNAME=f"eth{SURROGATE}",
               CXX=f"g++{SURROGATE}")
    no_traceback(doctor(tmp_path, tmp_path, *argv, env=env))


def xff_project(tmp_path: Path) -> Path:
    project = Path(os.fsdecode(bytes(tmp_path) + b"/proj\xff"))
    project.mkdir()
    return project


@pytest.mark.slow  # one process per command (~5 s of CPU); the fast test below runs fix's journal cycle there
def test_every_command_runs_in_a_project_folder_named_with_an_xff_byte(tmp_path: Path) -> None:
    project = xff_project(tmp_path)
    for argv in (["check"], ["env"], ["fix"], ["fix", "--history"], ["report", "-o", str(tmp_path / "r.json")]):
        no_traceback(doctor(project, tmp_path, *argv))
    log = tmp_path / "build.log"
    log.write_bytes(b"error: command 'g++' failed: No such file or directory: '/opt/\xff/g++'\n")
    no_traceback(doctor(project, tmp_path, "diagnose", str(log), "--here"))


@pytest.mark.slow
def test_a_project_folder_named_with_an_xff_byte(tmp_path: Path) -> None:
    project = xff_project(tmp_path)
    out = no_traceback(doctor(project, tmp_path, "fix", "--apply", "--only", "env"))
    assert "proj\\xff" in out  # the byte named, not dropped
    assert (project / ".olmo-doctor" / "env.sh").is_file()
    out = no_traceback(doctor(tmp_path, tmp_path, "fix", "--history", "--json", "--project", str(project)))
    rows = json.loads(out[: out.rindex("}") + 1])["entries"]
    assert [r["status"] for r in rows] == ["applied"]  # its own entry, bound to the \xff path, loads
    proc = doctor(project, tmp_path, "fix", "--undo")
    no_traceback(proc)
    assert proc.returncode == 0 and not (project / ".olmo-doctor" / "env.sh").exists()
