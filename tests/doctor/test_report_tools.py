"""Each tool output a report may hold, recognised by its own signature, on a real sample from a public thread (the
corpus file or the excerpt below names it): the facts it states, each under the right key, whose value it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.facts import FactValue
from olmo_doctor.report import load_report, parse_text
from tests.helpers import FIXTURES

CORPUS = FIXTURES / "report_corpus"

# https://github.com/pytorch/pytorch/issues/14274 (`ldd --version` on CentOS 6)
LDD = "`ldd --version` gives me `ldd (GNU libc) 2.12`\n`lsb_release -a` prints `CentOS release 6.8 (Final)`\n"
# https://github.com/meta-pytorch/data/issues/315 (`conda list | grep pytorch`)
CONDA_LIST = """❯ conda list | grep pytorch
ffmpeg                    4.3                  hf484d3e_0    pytorch
pytorch                   1.11.0          py3.8_cuda11.3_cudnn8.2.0_0    pytorch
pytorch-mutex             1.0                        cuda    pytorch
torchaudio                0.11.0               py38_cu113    pytorch
"""
# https://github.com/ByteDance-Seed/Bagel/issues/48 (`uv pip list`, cut where the thread's excerpt ends)
UV_PIP_LIST = """❯ uv pip list
Package                  Version
------------------------ ------------
filelock                 3.13.1
numpy                    2.1.2
nvidia-cudnn-cu12        9.5.1.17
nvidia-nccl-cu12         2.26.2
packaging                25.0
setuptools               70.2.0
"""
# https://github.com/microsoft/WSL/issues/9254 (an nvidia-smi table on Windows: TCC and WDDM rows)
SMI_TABLE = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 526.98       Driver Version: 526.98       CUDA Version: 12.0     |
|-------------------------------+----------------------+----------------------+
| GPU  Name            TCC/WDDM | Bus-Id        Disp.A | Volatile Uncorr. ECC |
|===============================+======================+======================|
|   0  Tesla P100-PCIE... TCC   | 00000000:04:00.0 Off |                    0 |
| N/A   35C    P0    25W / 250W |      8MiB / 16384MiB |      0%      Default |
|   1  NVIDIA GeForce ... WDDM  | 00000000:81:00.0  On |                  N/A |
"""
# https://github.com/vllm-project/vllm/issues/10147 (vLLM's collect_env, the torch-style layout)
VLLM_OLD = """Collecting environment information...
PyTorch version: 2.5.1+cu118
Is debug build: False
CUDA used to build PyTorch: 11.8
ROCM used to build PyTorch: N/A

OS: Ubuntu 20.04.6 LTS (x86_64)
GCC version: (Ubuntu 9.4.0-1ubuntu1~20.04.2) 9.4.0
Libc version: glibc-2.31

Python version: 3.10.15 (main, Oct  3 2024, 07:27:34) [GCC 11.2.0] (64-bit runtime)
Is CUDA available: True
CUDA runtime version: 11.8.89
GPU models and configuration:
GPU 0: Tesla V100S-PCIE-32GB
GPU 1: Tesla V100S-PCIE-32GB
"""

SAMPLES: list[tuple[str, str, dict[str, FactValue]]] = [
    ("torch capability warning", "01-blackwell-warning-lora.txt",
     {"gpu.0.compute_capability": "12.0", "torch.arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86",
                                                              "sm_90"]}),
    ("torch driver-too-old warning", "07-driver-too-old-warning-only.txt", {"driver.cuda_version": "11.4"}),
    ("nvcc -V", "20-nvcc-v-then-python-c.txt", {"nvcc.version": "11.6", "nvcc.full_version": "11.6.124"}),
    ("nvidia-smi header", "06-driver-too-old-smi-header.txt",
     {"driver.version": "470.86", "driver.cuda_version": "11.4"}),
    ("nvidia-smi table", "33-wsl-smi-err.txt", {"driver.version": "546.80", "gpu.count": 1,
                                                "gpu.0.compute_capability": "8.6"}),
    ("nvidia-smi table (Windows)", SMI_TABLE, {"driver.version": "526.98", "gpu.count": 2,
                                               "gpu.0.compute_capability": "6.0"}),
    ("gcc --version", "31-uv-gcc-nvcc-outputs.txt", {"gcc.version": "11.2.0", "nvcc.version": "12.6",
                                                     "python.version": "3.10.18"}),
    ("gcc -v", "44-flash-attn-glibc232-repl.txt", {"gcc.version": "10.2.1"}),
    ("ds_report", "09-ds-report-general-info.txt", {"torch.version": "2.3.0+cu121", "torch.cuda": "12.1",
                                                    "nvcc.version": "12.0"}),
    ("accelerate env", "22-accelerate-env-a6000.txt", {"torch.version": "2.3.0+cu121", "torch.cuda_available": True,
                                                       "glibc.version": "2.31", "gpu.0.compute_capability": "8.6"}),
    ("transformers env", "12-transformers-env-flash-attn.txt", {"torch.version": "2.3.1+cu121",
                                                                "python.version": "3.10.11", "glibc.version": "2.31"}),
    ("vLLM collect_env (sections)", "27-vllm-collect-env-sectioned.txt",
     {"torch.version": "2.7.0+cu128", "nvcc.version": "12.8", "gcc.version": "11.4.0"}),
    ("vLLM collect_env (torch layout)", VLLM_OLD, {"torch.version": "2.5.1+cu118", "nvcc.version": "11.8",
                                                   "gpu.count": 2, "glibc.version": "2.31"}),
    ("conda list", CONDA_LIST, {"torch.version": "1.11.0", "torch.cuda": "11.3"}),
    ("pip list", "48-pip-list-build-issue.txt", {"torch.version": "2.1.0+cu121", "setuptools.version": "68.0.0"}),
    ("pip freeze (collect_env's [pip3] lines)", "35-rocm-libraries-only.txt",
     {"torch.version": "2.10.0.dev20250929+rocm7.0"}),
    ("uv pip list", UV_PIP_LIST, {"setuptools.version": "70.2.0", "packaging.version": "25.0",
                                  "torch.cudnn": "9.5.1", "torch.nccl": "2.26.2"}),
    ("pip show", "20-nvcc-v-then-python-c.txt", {"ninja.version": "1.11.1.1"}),
    ("cpp_extension's CUDA mismatch", "18-detected-cuda-mismatch.txt", {"nvcc.version": "12.1", "torch.cuda": "11.7"}),
    ("xformers' built-for warning", "14-xformers-built-for-other-torch.txt", {"xformers.built_for_torch": "2.0.1"}),
    ("flash-attn's nvcc not found", "32-uv-pyproject-nvcc-missing.txt", {"nvcc.version": None}),
    ("an import failing on GLIBC", "46-prose-glibc-231.txt", {"flash_attn.import_ok": False}),
]


def _text(sample: str) -> str:
    path = CORPUS / sample
    return path.read_text(encoding="utf-8") if sample.endswith(".txt") and Path(path).is_file() else sample


@pytest.mark.parametrize(("tool", "sample", "expected"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_a_tool_output_states_its_facts(tmp_path: Path, tool: str, sample: str,
                                        expected: dict[str, FactValue]) -> None:
    path = tmp_path / "report.txt"
    path.write_text(_text(sample), encoding="utf-8")
    facts = load_report(path)
    assert {k: facts.get(k, "<unread>") for k in expected} == expected, tool


def test_ldd_version_states_glibc() -> None:
    # glibc alone is no report of a GPU machine (accept.py), so the reader is asked directly
    assert parse_text(LDD)["glibc.version"] == "2.12"
    assert parse_text("ldd (Ubuntu GLIBC 2.35-0ubuntu3.8) 2.35\n")["glibc.version"] == "2.35"


def test_conda_packages_mark_a_conda_environment() -> None:
    assert parse_text(CONDA_LIST)["os.conda_env"] == "conda"
