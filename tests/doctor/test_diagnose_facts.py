"""What the log says is weighed with what the machine says: a CPU-only torch named anywhere is the cause (not the
package that trips over it), and facts from a report (WSL2, a container's /dev/shm, the GPU count) steer an
unspecific failure to the cause they point at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.diagnose import diagnose

XFORMERS_WARNING = """\
WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:
    PyTorch 2.0.1+cu118 with CUDA 1108 (you have {version})
    Python  3.10.11 (you have 3.10.11)
  Please reinstall xformers (see https://github.com/facebookresearch/xformers#installing-xformers)
  Memory-efficient attention, SwiGLU, sparse and more won't be available.
"""


def codes(log: str, facts: dict[str, Any] | None = None) -> list[str]:
    return [f.code for f in diagnose([log], facts).findings]


@pytest.mark.parametrize("log", [
    XFORMERS_WARNING.format(version="2.0.1+cpu"),
    XFORMERS_WARNING.format(version="2.6.0.dev20241112+cpu"),
    "xformers 0.0.22 requires torch==2.1.0, but you have torch 2.1.0+cpu which is incompatible.\n"
    "AssertionError: xformers needs CUDA\n",
    "$ pip list | grep torch\ntorch                     2.3.0+cpu\nxformers                  0.0.26\n"
    "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n",
    "Collecting flash-attn\n  torch.__version__  = 2.4.0+cpu\n"
    "  OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.\n",
    "PyTorch version: 2.5.1+cpu\nIs debug build: False\nCUDA used to build PyTorch: None\n",
])
def test_a_cpu_torch_named_anywhere_is_the_root_cause(log: str) -> None:
    assert codes(log)[0] == "OD155"


def test_the_same_xformers_warning_with_a_cuda_torch_blames_xformers() -> None:
    assert codes(XFORMERS_WARNING.format(version="2.1.0+cu121"))[0] == "OD240"


def test_a_cpu_like_word_is_not_a_cpu_torch() -> None:
    log = "Requirement already satisfied: py-cpuinfo (9.0.0)\nUsing cpu offload+cpuadam 1.2+cpuadam\n"
    assert "OD155" not in codes(log)


NCCL_ERROR = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
              "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
              "NCCL version 2.19.3\n")


@pytest.mark.parametrize(("facts", "first"), [
    (None, "OD228"),
    ({"os.wsl": True, "gpu.count": 2}, "OD221"),
    ({"os.wsl": True}, "OD221"),  # WSL2 alone is enough to suspect it
    ({"os.wsl": False, "gpu.count": 2}, "OD228"),
    ({"os.wsl": True, "gpu.count": 1}, "OD228"),  # the WSL2 rule is about multi-GPU runs: its check says no
    ({"os.container": "docker", "shm.size_gb": 0.06, "gpu.count": 2}, "OD220"),
    ({"os.container": "docker", "shm.size_gb": 16.0, "gpu.count": 2}, "OD228"),
])
def test_machine_facts_steer_an_unspecific_nccl_error(facts: dict[str, Any] | None, first: str) -> None:
    diag = diagnose([NCCL_ERROR], facts)
    assert diag.findings[0].code == first
    top = diag.findings[0]
    assert top.matched_lines and top.matched_lines[0].line == 1  # the log line is quoted as its evidence
    if first != "OD228":
        assert "OD228" in [f.code for f in diag.findings[1:]]  # the unspecific reading stays, below


def test_report_file_steers_the_cli(tmp_path: Path) -> None:
    report = tmp_path / "collect_env.txt"
    report.write_text(
        "PyTorch version: 2.1.0+cu121\nIs debug build: False\nCUDA used to build PyTorch: 12.1\n"
        "OS: Ubuntu 22.04.3 LTS (x86_64)\nPython version: 3.10.12 (main, Nov 20 2023) [GCC 11.4.0] (64-bit runtime)\n"
        "Python platform: Linux-5.15.133.1-microsoft-standard-WSL2-x86_64-with-glibc2.35\n"
        "Is CUDA available: True\nCUDA runtime version: Could not collect\n"
        "GPU models and configuration:\nGPU 0: NVIDIA GeForce RTX 4090\nGPU 1: NVIDIA GeForce RTX 4090\n\n"
        "Nvidia driver version: 546.33\n")
    log = tmp_path / "nccl.log"
    log.write_text(NCCL_ERROR)
    plain = CliRunner().invoke(app, ["diagnose", str(log), "--json"])
    steered = CliRunner().invoke(app, ["diagnose", str(log), "--report", str(report), "--json"])
    assert json.loads(plain.stdout)["findings"][0]["code"] == "OD228"
    assert json.loads(steered.stdout)["findings"][0]["code"] == "OD221", steered.stdout
