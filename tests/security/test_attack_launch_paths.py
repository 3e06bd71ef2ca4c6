"""Attacks through how a command is launched: `python -m olmo` / `python -m olmo_doctor` (and torchrun's workers,
which it starts as `python -u -m olmo`), and a PYTHONPATH whose empty or relative entry names the working folder
(`export PYTHONPATH=$PYTHONPATH:/x` with PYTHONPATH unset leaves a leading ':'). Both put the working folder on
sys.path before the package's first line, so a json.py, numpy/ or yaml/ of a cloned repository would be imported
in place of the real one. PATH entries other than the empty one (`.`, a relative `bin`, a doubled `::`) must not
make `check` run the folder's tools either, and a site.py/sitecustomize.py/encodings/ there must stay inert.

Each test plants a module that writes a marker when imported (tests/security/_hostile.py's payloads) and asserts
no marker appeared. Source: the launch lines README gives for torchrun (`torchrun ... -m olmo train`) and the
common shell idiom above; the red-team classes "the working folder on the import path for every entry point".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _hostile import Hostile, build

BIN = Path(sys.executable).parent

_SHADOW = '''import os
open(os.path.join({markers!r}, {name!r}), "a").write("ran\\n")
'''


@pytest.fixture
def hostile(tmp_path: Path) -> Hostile:
    return build(tmp_path)


def _plant_package(h: Hostile, name: str) -> None:
    (h.folder / name).mkdir(exist_ok=True)
    (h.folder / name / "__init__.py").write_text(_SHADOW.format(markers=str(h.markers), name=name))


def _plant_module(h: Hostile, name: str, where: Path | None = None) -> None:
    folder = where or h.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(_SHADOW.format(markers=str(h.markers), name=name))


def _run(h: Hostile, tmp_path: Path, argv: list[str], **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = h.env()
    env["PATH"] = env["PATH"].rstrip(":")  # these tests put the folder on the import path, not on PATH
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_STATE_HOME=str(tmp_path / "state"), COLUMNS="200")
    env.update(env_extra)
    return subprocess.run(argv, cwd=h.folder, env=env, capture_output=True, text=True, timeout=300)


def _nothing_ran(h: Hostile, proc: subprocess.CompletedProcess[str]) -> None:
    assert h.ran() == [], f"planted code ran: {h.ran()}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


PY = sys.executable

# (id, argv, environment additions): each an entry point started so that the working folder is on sys.path
LAUNCHES = [
    ("python-m-olmo", [PY, "-m", "olmo", "--help"], {}),
    ("python-m-olmo-doctor", [PY, "-m", "olmo_doctor", "rules"], {}),
    ("torchrun-style-worker", [PY, "-u", "-m", "olmo", "validate-shards", "nodata"], {}),
    ("console-olmo-doctor-leading-colon-pythonpath", [str(BIN / "olmo-doctor"), "explain", "OD105"],
     {"PYTHONPATH": ":/nonexistent"}),
    ("console-olmo-dot-pythonpath", [str(BIN / "olmo"), "validate-shards", "nodata"], {"PYTHONPATH": "."}),
]


@pytest.mark.parametrize(("argv", "extra"), [(a, e) for _, a, e in LAUNCHES], ids=[i for i, _, _ in LAUNCHES])
def test_a_launch_with_the_folder_on_sys_path_imports_nothing_from_it(argv: list[str], extra: dict[str, str],
                                                                      hostile: Hostile, tmp_path: Path) -> None:
    for name in ("numpy", "yaml", "typer", "rich", "torch"):  # third-party packages the commands import
        _plant_package(hostile, name)
    proc = _run(hostile, tmp_path, argv, **extra)
    _nothing_ran(hostile, proc)


def test_a_relative_pythonpath_entry_is_not_imported_from(hostile: Hostile, tmp_path: Path) -> None:
    _plant_module(hostile, "json", hostile.folder / "lib")
    (hostile.folder / "json.py").unlink()
    proc = _run(hostile, tmp_path, [str(BIN / "olmo-doctor"), "rules"], PYTHONPATH="lib")
    _nothing_ran(hostile, proc)


@pytest.mark.parametrize("name", ["site", "sitecustomize", "usercustomize"])
def test_startup_hooks_in_the_folder_stay_inert_under_python_m(name: str, hostile: Hostile, tmp_path: Path) -> None:
    _plant_module(hostile, name)
    proc = _run(hostile, tmp_path, [PY, "-m", "olmo_doctor", "explain", "OD105"])
    _nothing_ran(hostile, proc)


def test_an_encodings_package_in_the_folder_stays_inert(hostile: Hostile, tmp_path: Path) -> None:
    _plant_package(hostile, "encodings")
    proc = _run(hostile, tmp_path, [PY, "-m", "olmo", "--help"])
    _nothing_ran(hostile, proc)


def test_the_safe_torchrun_launch_keeps_even_early_imports_out(hostile: Hostile, tmp_path: Path) -> None:
    """Modules Python's -m machinery imports before the package's first line (re, importlib, enum ...) can only
    be kept out by the launcher: README's torchrun lines set PYTHONSAFEPATH=1, which the workers inherit."""
    for name in ("re", "enum", "functools"):
        _plant_module(hostile, name)
    proc = _run(hostile, tmp_path, [PY, "-u", "-m", "olmo", "--help"], PYTHONSAFEPATH="1")
    _nothing_ran(hostile, proc)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    bare = [line for line in readme.splitlines()
            if "torchrun --n" in line and "PYTHONSAFEPATH=1" not in line and "--no-python" not in line]
    assert bare == [], f"README launches torchrun with the working folder on the import path: {bare}"


@pytest.mark.slow
def test_check_runs_no_tool_through_path_entries_naming_the_folder(hostile: Hostile, tmp_path: Path) -> None:
    """'.', a relative 'bin', './bin' and a doubled '::' all name the working folder (or a folder in it)."""
    proc = _run(hostile, tmp_path, [str(BIN / "olmo-doctor"), "check", "--json"], PATH=".:bin:./bin:/usr/bin::/bin")
    _nothing_ran(hostile, proc)
    assert proc.returncode in (0, 1), proc.stderr[-1000:]
    assert all(e in proc.stdout for e in ('"."', '"bin"', '"./bin"')), proc.stdout[-2000:]


def _plant_libraries(h: Hostile, *names: str) -> None:
    """Copies of the folder's evil.so (its constructor writes the 'ld-preload' marker) under library names."""
    for name in names:
        shutil.copy(h.folder / "evil.so", h.folder / name)


@pytest.mark.parametrize("value", [":/nonexistent", "/nonexistent:", ".", "lib"], ids=["leading", "trailing", "dot",
                                                                                       "relative"])
def test_a_library_path_entry_naming_the_folder_loads_nothing_from_it(value: str, hostile: Hostile,
                                                                      tmp_path: Path) -> None:
    """`export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64` with the variable unset: the linker reads
    the empty entry as the working folder for every later dlopen (torch's libgomp, pynvml's libnvidia-ml)."""
    _plant_libraries(hostile, "libgomp.so.1", "libnvidia-ml.so.1")
    (hostile.folder / "lib").mkdir()
    shutil.copy(hostile.folder / "evil.so", hostile.folder / "lib" / "libgomp.so.1")
    code = ("import ctypes\nfrom olmo_doctor.isolation import sanitize_process_path\nsanitize_process_path()\n"
            "for name in ('libgomp.so.1', 'libnvidia-ml.so.1'):\n"
            "    try:\n        ctypes.CDLL(name)\n    except OSError:\n        pass\n")
    proc = _run(hostile, tmp_path, [PY, "-P", "-c", code], LD_LIBRARY_PATH=value)
    _nothing_ran(hostile, proc)
    from olmo_doctor.isolation import child_env

    kept = [e for e in f"{value}:/opt/lib".split(":") if e.startswith("/")]
    assert child_env(base={"LD_LIBRARY_PATH": f"{value}:/opt/lib"})["LD_LIBRARY_PATH"] == ":".join(kept)


@pytest.mark.slow
def test_olmo_train_loads_no_library_from_the_folder(hostile: Hostile, tmp_path: Path) -> None:
    _plant_libraries(hostile, "libstdc++.so.6", "libgomp.so.1")
    proc = _run(hostile, tmp_path, [str(BIN / "olmo"), "train", "olmo2_60m", "--dry-run", "--skip-doctor"],
                LD_LIBRARY_PATH=":/nonexistent")
    _nothing_ran(hostile, proc)
    assert proc.returncode == 0, proc.stderr[-1500:]
