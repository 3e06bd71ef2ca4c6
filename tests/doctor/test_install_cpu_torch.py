"""install.sh on a machine without an NVIDIA GPU: the CPU build of torch, never a silent multi-GB CUDA download,
and one line per optional extra saying whether it was installed and why not.

Why Python 3.10 and 3.12 pulled the CUDA torch: the CPU build lives only on download.pytorch.org/whl/cpu; when that
index could not be reached install.sh fell back to the default index, and PyPI's torch for Linux x86_64 is the CUDA
build (about 20 nvidia-*/cuda-* packages, 5.6 GB installed). Python 3.11 only escaped it on machines with a local
CPU wheel for cp311. Now the fallback asks pip (a dry run with a report) what the default index would install,
takes it only when it is a CPU build, and otherwise stops with one line naming the way out (--torch-index,
--use-system-torch, --allow-cuda-torch).

The runs use a stand-in Python (a script answering as python and as the venv's pip would), so no network is used
and nothing is installed; what install.sh asked it to do is read back from its log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE = r'''#!{real}
import json, os, sys
from pathlib import Path

REAL = {real!r}
me = Path(sys.argv[0]).absolute()
venv = me.parent.parent
in_venv = (venv / "pyvenv.cfg").is_file()
args = sys.argv[1:]
while args[:1] in (["-I"], ["-P"]):  # install.sh runs pip isolated; the stand-in answers the same either way
    args = args[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(("venv: " if in_venv else "base: ") + " ".join(args) + "\n")
mark = venv / "torch-installed"
default = os.environ["FAKE_DEFAULT"]  # what the default index offers: "cuda" or "cpu"
version = os.environ.get("FAKE_TORCH", "2.14.1" if default == "cuda" else "2.13.0+cpu")
if args[:2] == ["-m", "venv"]:
    d = Path(args[-1])
    (d / "bin").mkdir(parents=True)
    (d / "pyvenv.cfg").write_text("")
    shutil_copy = (d / "bin" / "python")
    shutil_copy.write_text(me.read_text())
    shutil_copy.chmod(0o755)
    sys.exit(0)
if args[:1] == ["-c"]:
    code = args[1]
    if "sys.version_info" in code:
        print("3.11.7")
        sys.exit(0)
    if "json.load" in code:  # install.sh's reader of pip's report
        os.execv(REAL, [REAL, *args])
    if "import torch" in code:
        if not (in_venv and mark.exists()) or "olmo_doctor" in code:
            sys.exit(1)
        print(mark.read_text())
    sys.exit(0)
if args[:1] == ["-"] or (args[:1] == ["-m"] and args[1].startswith("olmo_doctor")):  # the wheel table
    os.execv(REAL, [REAL, *args])
if args[:2] == ["-m", "pip"]:
    if "--dry-run" in args:
        names = ["torch"] + (["cuda-toolkit", "nvidia-cudnn-cu13", "nvidia-cublas", "triton"] if default == "cuda"
                             else [])
        report = {{"install": [{{"metadata": {{"name": n, "version": version if n == "torch" else "1"}}}}
                               for n in names + ["filelock"]]}}
        Path(args[args.index("--report") + 1]).write_text(json.dumps(report))
        sys.exit(0)
    if "--index-url" in args and args[args.index("--index-url") + 1].endswith("/cpu"):
        print("WARNING: Retrying (Retry(total=0)) after connection broken by NameResolutionError: /whl/cpu/torch/",
              file=sys.stderr)
        print("ERROR: No matching distribution found for torch", file=sys.stderr)
        sys.exit(1)
    if "install" in args and "torch" in args:
        mark.write_text(version)
    sys.exit(0)
sys.exit(0)
'''


def _install(tmp_path: Path, default: str, *args: str, torch: str | None = None) -> tuple[int, str, str, list[str]]:
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ROOT / "install.sh", proj / "install.sh")
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    shutil.copytree(ROOT / "olmo_doctor", proj / "olmo_doctor", ignore=shutil.ignore_patterns("__pycache__"))
    fake = tmp_path / "python3"
    fake.write_text(FAKE.format(real=sys.executable))
    fake.chmod(0o755)
    (tmp_path / "bin").mkdir()  # no nvidia-smi on PATH: a machine without an NVIDIA GPU
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path),
           "FAKE_LOG": str(tmp_path / "log"), "FAKE_DEFAULT": default, **({"FAKE_TORCH": torch} if torch else {})}
    proc = subprocess.run(["bash", str(proj / "install.sh"), "--python", str(fake), *args], cwd=proj,
                          capture_output=True, text=True, env=env, timeout=120)
    log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    return proc.returncode, proc.stdout, proc.stderr, log


def _torch_installs(log: list[str]) -> list[str]:
    return [ln for ln in log if ln.startswith("venv: -m pip") and " install " in f"{ln} " and " torch" in f"{ln} "
            and "--dry-run" not in ln and "--index-url" not in ln and " -e " not in ln]


def test_cuda_torch_is_never_a_silent_download(tmp_path: Path) -> None:
    code, out, err, log = _install(tmp_path, "cuda")
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "the CPU wheel index failed" in err and "download.pytorch.org cannot be reached" in out
    assert "--allow-cuda-torch" in err and "--torch-index" in err
    assert "torch 2.14.1 with 4 CUDA packages" in err
    assert not _torch_installs(log), log  # the CUDA torch was never installed
    assert any("--dry-run" in ln for ln in log)  # it asked pip what the default index would install
    assert "WARNING: Retrying" not in out + err  # pip's retry noise stays in the log


def test_allow_cuda_torch_installs_it_saying_so(tmp_path: Path) -> None:
    code, out, err, log = _install(tmp_path, "cuda", "--allow-cuda-torch")
    assert code == 0, (out, err)
    assert "--allow-cuda-torch: installing the CUDA build" in out
    assert len(_torch_installs(log)) == 1


def test_a_cpu_build_on_the_default_index_is_taken(tmp_path: Path) -> None:
    code, out, err, log = _install(tmp_path, "cpu")
    assert code == 0, (out, err)
    assert "looking for a CPU build of torch on the default index" in out
    assert len(_torch_installs(log)) == 1


@pytest.mark.parametrize(("torch", "core", "fp8"), [
    ("2.13.0+cpu", "extra olmo-core: installed", "extra fp8: installed (torchao>=0.17.0, the torchao release made "
                                                 "for torch 2.13.0+cpu)"),
    ("2.9.1+cpu", "extra olmo-core: skipped: ai2-olmo-core 3.x needs torch >= 2.10, < 2.14 and this venv has torch "
                  "2.9.1+cpu", "extra fp8: installed (torchao==0.15.0"),
    ("2.4.1+cpu", "extra olmo-core: skipped", "extra fp8: skipped: no torchao release is made for torch 2.4.1+cpu"),
])
@pytest.mark.slow
def test_each_extra_is_said_installed_or_skipped_with_why(torch: str, core: str, fp8: str, tmp_path: Path) -> None:
    code, out, err, log = _install(tmp_path, "cpu", torch=torch)
    assert code == 0, (out, err)
    assert core in out and fp8 in out, out
    assert "extras: " in out  # and what the venv has, in one line
    pins = [ln for ln in log if "[fp8]" in ln]
    assert all(f"torch=={torch}" in ln for ln in pins)  # never replacing the installed torch


def test_install_sh_help_lists_allow_cuda_torch() -> None:
    out = subprocess.run(["bash", str(ROOT / "install.sh"), "--help"], capture_output=True, text=True, check=True)
    assert "--allow-cuda-torch" in out.stdout
