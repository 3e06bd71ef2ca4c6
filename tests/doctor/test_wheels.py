"""The torch wheel table (olmo_doctor/compat/wheels.py), the choice among it (compat/pick.py) and `install.sh
--dry-run` choosing with a stand-in nvidia-smi on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmo_doctor.compat import pick, wheels

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("driver", "ccs", "index", "torch"), [
    ("535.104.05", ["9.0"], "cu126", "torch"),          # H100 cluster on 535: minor-version compatibility
    ("550.54.14", ["9.0", "9.0"], "cu126", "torch"),
    ("525.60.13", ["8.0"], "cu126", "torch"),           # the CUDA 12 minor-version floor itself
    ("570.86.10", ["12.0"], "cu128", "torch<2.12"),    # Blackwell before a 580 driver: cu128, the last is 2.11
    ("580.95.05", ["9.0"], "pypi", "torch"),
    ("580.95.05", ["6.1"], "cu126", "torch"),          # Pascal: only the cu126 build still has sm_60
    ("590.44.01", ["7.0", "9.0"], "cu126", "torch"),   # a V100 beside an H100: the one build covering both
    ("580.95.05", [None], "pypi", "torch"),            # cc unknown: assume a current GPU
])
def test_pick(driver: str, ccs: list[str | None], index: str, torch: str) -> None:
    choice = pick.pick(driver, ccs, "3.12.3")
    assert choice.refuse is None and choice.index is not None
    assert (choice.index.name, choice.torch) == (index, torch)


@pytest.mark.parametrize(("driver", "ccs", "python", "code"), [
    ("470.57.02", ["7.0"], "3.12.3", "OD105"),
    ("418.87.01", ["7.0"], "3.12.3", "OD105"),
    ("535.104.05", ["3.7"], "3.12.3", "OD147"),   # Kepler: no current wheel has kernels
    ("580.95.05", ["2.0"], "3.12.3", "OD147"),
    ("535.104.05", ["9.0"], "3.16.0", "OD181"),
    ("535.104.05", ["9.0"], "3.9.18", "OD180"),
])
def test_refusals_name_the_rule(driver: str, ccs: list[str | None], python: str, code: str) -> None:
    choice = pick.pick(driver, ccs, python)
    assert choice.index is None and choice.refuse == code


def test_no_gpu_gets_the_cpu_build() -> None:
    choice = pick.pick(None, [], "3.12.3")
    assert choice.index is not None and choice.index.name == "cpu"


@pytest.mark.parametrize(("python", "torch", "verdict"), [
    ("3.12.3", "2.11.0+cu130", "ok"), ("3.15.0", None, "ok"), ("3.16.1", "2.14.0", "too_new"),
    ("3.14.0", "2.5.1+cu124", "ok"),         # too new for the installed torch, fine for current torch
    ("3.8.10", "1.13.1+cu117", "ok"),        # fits the installed torch
    ("3.8.10", "2.11.0", "too_old"), ("3.16.0", None, "too_new"), ("3.12.3", "2.6.0.dev20241001+cu124", "ok"),
])
def test_python_verdict(python: str, torch: str | None, verdict: str) -> None:
    assert wheels.python_verdict(python, torch) == verdict


def test_kernel_coverage() -> None:
    assert wheels.gpu_has_wheel("9.0") and wheels.gpu_has_wheel("12.1") and wheels.gpu_has_wheel("5.2")
    assert not wheels.gpu_has_wheel("3.7") and not wheels.gpu_has_wheel("3.5")
    assert wheels.gpu_has_wheel(None) is None
    assert wheels.driver_has_wheel("525.60.13") and not wheels.driver_has_wheel("520.61.05")


# --- install.sh --dry-run with a stand-in nvidia-smi ---------------------------------------------------------

def _project_copy(tmp_path: Path) -> Path:
    """install.sh and the package it reads (olmo_doctor/compat/), in a folder of their own: a dry run must create
    nothing, and nothing else of the project is there to import."""
    proj = tmp_path / "proj"
    (proj / "olmo_doctor").mkdir(parents=True)
    shutil.copy(ROOT / "install.sh", proj / "install.sh")
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    shutil.copy(ROOT / "olmo_doctor" / "__init__.py", proj / "olmo_doctor" / "__init__.py")
    shutil.copytree(ROOT / "olmo_doctor" / "compat", proj / "olmo_doctor" / "compat",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return proj


def _smi(bin_dir: Path, rows: str | None, compute_cap: bool = True) -> None:
    """A stand-in nvidia-smi: `rows` are 'driver, cc, name' lines (None: the driver is not loaded)."""
    bin_dir.mkdir(exist_ok=True)
    if rows is None:
        body = 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver." >&2; exit 9'
    else:
        no_cc = "\n".join(f"{r.split(',')[0]},{r.split(',', 2)[2]}" for r in rows.splitlines())
        # quoted here-documents: the stand-in prints the rows verbatim, whatever they contain
        refuse = '  *compute_cap*) echo "Field \\"compute_cap\\" is not a valid field to query." >&2; exit 2;;\n'
        body = ('case "$*" in\n  -L) echo "GPU 0: x";;\n'
                + (f"  *compute_cap*) cat <<'ROWS'\n{rows}\nROWS\n  ;;\n" if compute_cap else refuse)
                + f"  *driver_version,name*) cat <<'ROWS'\n{no_cc}\nROWS\n  ;;\n  *) exit 1;;\nesac")
    path = bin_dir / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def _dry_run(tmp_path: Path, *args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    proj = _project_copy(tmp_path)
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", str(proj / "install.sh"), "--dry-run", "--python", python, *args],
                          capture_output=True, text=True, env=env, timeout=60)
    assert not (proj / ".venv").exists()
    assert sorted(p.name for p in proj.iterdir()) == ["install.sh", "olmo_doctor", "pyproject.toml"]
    return proc


@pytest.mark.parametrize(("rows", "index"), [
    ("535.104.05, 9.0, NVIDIA H100 80GB HBM3", "whl/cu126"),
    ("550.127.05, 9.0, NVIDIA H800\n550.127.05, 9.0, NVIDIA H800", "whl/cu126"),
    ("570.124.06, 12.0, NVIDIA GeForce RTX 5090", "whl/cu128"),
    ("580.95.05, 9.0, NVIDIA H200", "PyPI"),
    ("575.51.03, 6.1, NVIDIA GeForce GTX 1080 Ti", "whl/cu126"),   # Pascal
])
def test_install_dry_run_picks_the_index(tmp_path: Path, rows: str, index: str) -> None:
    _smi(tmp_path / "bin", rows)
    proc = _dry_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"index: {'https://download.pytorch.org/' if 'whl' in index else ''}{index}" in proc.stdout
    assert "python: " in proc.stdout and "torch: torch" in proc.stdout and "why: driver" in proc.stdout


def test_install_dry_run_old_nvidia_smi_uses_the_name(tmp_path: Path) -> None:
    _smi(tmp_path / "bin", "535.54.03, , Tesla P100-PCIE-16GB", compute_cap=False)
    proc = _dry_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "whl/cu126" in proc.stdout and "6.0" in proc.stdout


@pytest.mark.parametrize(("rows", "code"), [
    ("470.57.02, 7.0, Tesla V100-SXM2-32GB", "OD105"),
    ("470.57.02, 3.7, Tesla K80", "OD105"),
    ("535.104.05, 3.7, Tesla K80", "OD147"),
])
def test_install_refuses_what_cannot_work(tmp_path: Path, rows: str, code: str) -> None:
    _smi(tmp_path / "bin", rows)
    proc = _dry_run(tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"olmo-doctor explain {code}" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("rows", [None, ""])
def test_install_without_gpu_takes_the_cpu_build(tmp_path: Path, rows: str | None) -> None:
    if rows is not None:
        (tmp_path / "bin").mkdir()  # no nvidia-smi at all
    else:
        _smi(tmp_path / "bin", None)
    proc = _dry_run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "index: https://download.pytorch.org/whl/cpu" in proc.stdout


def test_install_refuses_a_python_too_new(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "python3.16"  # reports 3.16.0, runs the module with the real interpreter
    fake.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then echo 3.16.0; else exec "{sys.executable}" "$@"; fi\n')
    fake.chmod(0o755)
    proc = _dry_run(tmp_path, python=str(fake))
    assert proc.returncode == 2 and "olmo-doctor explain OD181" in proc.stderr


def test_driver_values_are_data_not_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _smi(tmp_path / "bin", f"535.104.05, 9.0, $(touch {marker}) `touch {marker}`")
    proc = _dry_run(tmp_path)
    assert not marker.exists()
    assert proc.returncode == 0 and "unknown" not in proc.stderr.lower()


def test_install_sh_entry_runs_on_the_standard_library_alone() -> None:
    """`python3 -m olmo_doctor.compat pick` (install.sh's question) answers with no site-packages (-S): no packaging,
    no typer, as before any venv exists."""
    args = ["pick", "--python", "3.12.3", "--driver", "570.26", "--gpu", "NVIDIA GeForce RTX 5090|"]
    proc = subprocess.run([sys.executable, "-S", "-m", "olmo_doctor.compat", *args], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "index=cu128" in proc.stdout
