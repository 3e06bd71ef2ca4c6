"""The reading gaps the third report corpus (tests/fixtures/report_corpus/cases3.toml) found, each tested as a
family on texts other than the corpus's own: nvidia-smi's R610 header, the kernel module's version in `dkms status`
and /proc/driver/nvidia/version, `python -m xformers.info`'s fields, compact environment tags, conda's CUDA runtime
packages and build strings, GPU model numbers glued to "GPU", values offered as a choice, a bare CUDA with a
toolkit's full release, Python as py3.x, and news of a release (what a project or a release does) that states nothing
about a machine. Each family has a near miss that must not read, so a fix that only matched the corpus's wording
fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.api import run_check
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import FactValue
from olmo_doctor.report import parse_text

READ: list[tuple[str, dict[str, FactValue]]] = [
    # nvidia-smi from R610 on: "KMD Version" and "CUDA UMD Version"
    ("| NVIDIA-SMI 615.12.01    KMD Version: 615.12.01    CUDA UMD Version: 13.4 |\n",
     {"driver.version": "615.12.01", "driver.cuda_version": "13.4"}),
    # the kernel module, as dkms lists it (old and new formats) and as /proc/driver/nvidia/version prints it
    ("$ dkms status\nnvidia, 535.104.05, 5.15.0-91-generic, x86_64: installed\n", {"driver.version": "535.104.05"}),
    ("nvidia/550.54.15, 6.5.0-27-generic, x86_64: installed\n", {"driver.version": "550.54.15"}),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  545.29.06  Thu Nov 16 01:59:08 UTC 2023\n",
     {"driver.version": "545.29.06"}),
    # python -m xformers.info: torch's version and CUDA, and the torch xformers was built for
    ("xFormers 0.0.27\npytorch.version:                                   2.3.1+cu121\n"
     "pytorch.cuda:                                      available\n"
     "build.torch_version:                               2.3.0+cu121\n"
     "build.python_version:                              3.11.9\n",
     {"torch.version": "2.3.1+cu121", "torch.cuda_available": True, "xformers.built_for_torch": "2.3.0+cu121",
      "xformers.version": "0.0.27"}),
    ("pytorch.cuda:                                      not available\n", {"torch.cuda_available": False}),
    # compact tags, as image and wheel names write an environment
    ("H100 box, image tag py311-torch240-cu124\n",
     {"python.version": "3.11", "torch.version": "2.4.0", "torch.cuda": "12.4"}),
    ("env: py3.10_torch2.5.1_cu121\n", {"python.version": "3.10", "torch.version": "2.5.1", "torch.cuda": "12.1"}),
    # conda's CUDA runtime packages say the CUDA a conda torch is built against; its build string names Python
    ("conda create -n x python=3.9\nmy env: pytorch==1.12.1 cudatoolkit=11.3\n",
     {"torch.version": "1.12.1", "torch.cuda": "11.3"}),
    ("[conda] pytorch                   2.2.2           py3.11_cuda12.1_cudnn8.9.2_0    pytorch\n",
     {"python.version": "3.11", "torch.cuda": "12.1"}),
    ("[conda] pytorch                   2.5.1           cuda126_py312h1763f6d_306    conda-forge\n",
     {"python.version": "3.12", "torch.cuda": "12.6"}),
    # a GeForce model number glued to "GPU"
    ("GPU4090, driver 550.54.15\n", {"gpu.0.name": "4090", "driver.version": "550.54.15"}),
    ("GPU: 3060 Ti\ntorch 2.7.1+cu126\n", {"gpu.0.name": "3060 Ti"}),
    # a GeForce number that can only be a GPU: with a count, or with its Ti/SUPER
    ("配置：\n4090*4\n", {"gpu.count": 4, "gpu.0.name": "4090"}),
    ("8x 3090, torch 2.7.1+cu126\n", {"gpu.count": 8}),
    ("Ubuntu 20.04, 3080ti, torch 2.7.1\n", {"gpu.0.name": "3080ti"}),
    # the driver named with a vendor prefix; uv's interpreter line
    ("NV-driver 535.104.05\n", {"driver.version": "535.104.05"}),
    ("Using CPython 3.11.9 interpreter at: /usr/bin/python3.11\n", {"python.version": "3.11.9"}),
    # a sentence ending on the GPU's name; a colon that ends a sentence, not a label
    ("I use RTX3090. The script fails.\n", {"gpu.0.name": "RTX3090"}),
    ("(if this helps anyone in some way: im using torch2.5.1+cu124)\n", {"torch.version": "2.5.1+cu124"}),
    # several device indices on one line (sglang's check_env), a GPU count labelled apart from the type
    ("GPU 0,1,2,3: NVIDIA H100 80GB HBM3\nPyTorch: 2.7.1+cu126\n", {"gpu.count": 4}),
    ("- GPU type: NVIDIA L40S\n- GPU number: 2\n- Python version: 3.11.9\n", {"gpu.count": 2}),
    # each name on a line, its version on the next
    ("Versions:\ntorch\n2.7.1\ntransformers\n4.53.0\npython\n3.11.9\n", {"torch.version": "2.7.1",
                                                                       "python.version": "3.11.9"}),
    # a wheel in a markdown link, on a line labelled with its own package
    ("- torch: [torch-2.5.0a0+872d972e41.nv24.08-cp310-cp310-linux_aarch64.whl](https://example.org/"
     "torch-2.5.0a0+872d972e41.nv24.08-cp310-cp310-linux_aarch64.whl)\n",
     {"torch.version": "2.5.0a0+872d972e41.nv24.08", "python.version": "3.10"}),
    # a project's own printout of torch's fields, each labelled "PyTorch ..."
    ("PyTorch Version: 2.4.1\nPyTorch Backend cudnn: 90100\nPyTorch CUDA available: False\n",
     {"torch.version": "2.4.1", "torch.cudnn": "9.1.0", "torch.cuda_available": False}),
    # a separator between different things is no choice: "torch==2.3.1 / python 3.11.9 / 8x H100"
    ("torch 2.6.0+cu124 / python 3.12.3 / RTX 4090\n", {"torch.version": "2.6.0+cu124", "python.version": "3.12.3"}),
    # a CUDA named with a full release is a toolkit's (the driver's and torch's CUDA never carry a patch level)
    ("Arch with glibc 2.41 and CUDA 12.8.93, RTX 4090\n", {"glibc.version": "2.41", "nvcc.version": "12.8"}),
    # Python as py3.x
    ("py3.12 venv, torch 2.7.1+cu128\n", {"python.version": "3.12"}),
    # what the reporter built is installed: only a project's or a script's building is not
    ("I built flash-attn 2.7.3 from source; torch 2.7.0+cu128\n", {"flash_attn.version": "2.7.3"}),
]

UNREAD: list[tuple[str, set[str]]] = [
    # a choice of values is no value
    ("- **Python Version**: 3.11/3.12\n- **GPU**: RTX 4090\n", {"python.version"}),
    ("Python version: 3.10 or 3.11\nGPU: RTX 3090\n", {"python.version"}),
    ("torch 2.4.1 / 2.5.0 both fail on my RTX 4090\n", {"torch.version"}),
    # news of a release, or what a script does, next to a machine that is stated
    ("torch 2.6 drops Python 3.8; here: RTX 4090, driver 550.54.15\n", {"torch.version", "python.version"}),
    ("The script builds flash-attn 2.8.3 against the venv's torch. My GPU: RTX 4090\n", {"flash_attn.version"}),
    # build.python_version is the machine xformers was built on
    ("pytorch.version:   2.3.1+cu121\nbuild.python_version:   3.11.9\n", {"python.version"}),
    # a tool asking whether it runs under WSL, then saying it does not
    ("RTX 3090, driver 535.104.05\nI1128 nvc.c:393] attempting to load dxcore to see if we are running under "
     "Windows Subsystem for Linux (WSL)\nI1128 nvc.c:395] dxcore initialization failed, continuing assuming a "
     "non-WSL environment\n", {"os.wsl"}),
    # a bare CUDA with major.minor is anyone's: the driver's, the toolkit's or torch's
    ("CUDA 12.8, RTX 5090, driver 572.16\n", {"nvcc.version", "torch.cuda"}),
    # a question to someone, a supposition, a class of versions, what a package is made for
    ("Did you install PyTorch 2.4.0+cu121 first? Here: RTX 4090\n", {"torch.version"}),
    ("assuming the driver supports CUDA 12.1.1, RTX 4090\n", {"nvcc.version"}),
    ("xformers should work across all pytorch 2.4.0 builds; RTX 4090\n", {"torch.version"}),
    ("no xformers for PyTorch 2.6.0 on Windows; Python 3.12\n", {"torch.version"}),
    ("Requires: torch 2.6 and Python 3.10; RTX 4090\n", {"torch.version"}),
    # wheels offered as downloads: links under other labels (only their Python tags, which disagree here)
    ("- **Linux**: [torch-2.6.0-cp311-cp311-linux_x86_64.whl](https://example.org/torch-2.6.0-cp311-cp311-"
     "linux_x86_64.whl)\n- GPU: RTX 4090\n", {"torch.version"}),
    # a bare CUDA on its own line before a version is anyone's CUDA
    ("CUDA\n12.4\nGPU: RTX 4090\n", {"nvcc.version", "torch.cuda"}),
    # a CPU's cache level (lscpu) is no NVIDIA L2
    ("L2 cache:                                32 MiB (16 instances)\nPython 3.12.3\n", {"gpu.count", "gpu.0.name"}),
    # a number that is no GPU, a driver package's name without a version
    ("fixed in 2080 and port 3090 is open; torch 2.7.1\n", {"gpu.count", "gpu.0.name"}),
    ("sudo apt install nvidia-driver-550 then reboot; torch 2.7.1\n", {"driver.version"}),
    # a tag without its torch part, and "torch231" alone, say nothing about torch
    ("tag py310-cu121 on RTX 4090\n", {"torch.version", "torch.cuda"}),
]

NOT_A_REPORT = [
    "torch 2.12 adds a stable ABI; xformers 0.0.34 drops its torch pin.\n",
    "The CI now builds flash-attn 2.8.3 for every PR.\n",
]


@pytest.mark.parametrize(("text", "want"), READ, ids=[f"read{i}" for i in range(len(READ))])
def test_each_family_is_read(text: str, want: dict[str, FactValue]) -> None:
    facts = parse_text(text)
    assert {k: facts.get(k) for k in want} == want


@pytest.mark.parametrize(("text", "keys"), UNREAD, ids=[f"unread{i}" for i in range(len(UNREAD))])
def test_near_misses_stay_unread(text: str, keys: set[str]) -> None:
    facts = parse_text(text)
    assert not keys & set(facts), {k: facts[k] for k in keys & set(facts)}


@pytest.mark.parametrize("text", NOT_A_REPORT)
def test_news_of_a_release_is_not_a_report(tmp_path: Path, text: str) -> None:
    path = tmp_path / "note.txt"
    path.write_text(text)
    with pytest.raises(UsageError, match="not a report"):
        run_check(from_report=path)
