"""The families behind the misses of the fifth report corpus (tests/fixtures/report_corpus/cases5.toml, 13/25 on its
first run), each in several wordings with the near misses that must not be read. Where a case comes from is named
beside it; the others are the same tool's output or sentence written another way.
"""

from __future__ import annotations

import pytest
from helpers import report_facts

from olmo_doctor.errors import UsageError

facts = report_facts


# --- `cat /proc/driver/nvidia/version`: its GCC line built the kernel module (cases5.toml 402, 403)
@pytest.mark.parametrize(("nvrm", "arch"), [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  35.3.1  Release Build  (buildbrain@mobile)", "aarch64"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.173.02  Tue Jun 23 08:38:17 UTC 2026", "x86_64"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)", "x86_64"),
])
def test_the_module_builds_compiler_is_not_the_hosts(nvrm: str, arch: str) -> None:
    got = facts(f"GPU: NVIDIA A100\n{nvrm}\nGCC version:  gcc version 9.3.0 (Buildroot 2020.08)\n")
    assert "gcc.version" not in got and got["os.arch"] == arch


def test_the_hosts_own_gcc_beside_it_is_still_read() -> None:
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n\n$ gcc --version\n"
            "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\n")
    assert facts(text)["gcc.version"] == "11.4.0"


# --- Lightning's collect_env_details (cases5.toml 410, 411)
LIGHTNING = ("* CUDA:\n        - GPU:{gpus}\n        - available:         {avail}\n"
             "        - version:           {ver}\n* Lightning:\n        - torch:             {torch}\n")


@pytest.mark.parametrize(("gpus", "avail", "ver", "torch", "cuda", "count"), [
    ("\n                - NVIDIA GeForce RTX 4090\n                - NVIDIA GeForce RTX 4090", "True", "11.8",
     "2.6.0+cu118", "11.8", 2),
    ("               None", "False", "11.7", "2.0.0", "11.7", None),
    ("               None", "False", "None", "2.1.0+cpu", None, None),
])
def test_lightnings_cuda_section(gpus: str, avail: str, ver: str, torch: str, cuda: str | None,
                                 count: int | None) -> None:
    got = facts(LIGHTNING.format(gpus=gpus, avail=avail, ver=ver, torch=torch))
    assert got["torch.cuda_available"] is (avail == "True") and got.get("torch.cuda") == cuda
    assert got.get("gpu.count") == count  # "GPU: None" names no GPU ("available: False" is no GPU's name)
    assert "gpu.0.name" not in got or "available" not in str(got["gpu.0.name"])


# --- a labelled GPU line wins over GPUs named as examples (cases5.toml 406, ollama/ollama#17841)
@pytest.mark.parametrize(("label", "count"), [
    ("GPU: NVIDIA RTX A6000，compute capability 8.6", 1), ("- GPU model: 2x RTX 3090", 2),
    ("显卡：RTX 4090", 1), ("* **GPU**: NVIDIA A100 80GB x 4", 4)])
def test_a_labelled_gpu_beats_a_list_of_examples(label: str, count: int) -> None:
    text = (f"OS: Ubuntu 22.04\n{label}\nkernels miss sm_86 (RTX 3090/3080/3070, A40, RTX A6000/A5000, A10 and "
            "others) and fall back to the CPU\n")
    got = facts(text)
    assert got["gpu.count"] == count and got["gpu.0.compute_capability"] in ("8.6", "8.9", "8.0")


# --- tool logs that state the GPU or the driver their own way (cases5.toml 412, 413)
def test_bitsandbytes_highest_capability() -> None:
    text = ("CUDA SETUP: CUDA runtime path found: /usr/local/cuda/lib64/libcudart.so\n"
            "CUDA SETUP: Highest compute capability among GPUs detected: 8.0\nCUDA SETUP: Detected CUDA version 122\n")
    assert facts(text)["gpu.0.compute_capability"] == "8.0"


@pytest.mark.parametrize(("line", "cuda"), [("Driver 13.0", "13.0"), ("驱动 13.2（R576 系列）", "13.2"),
                                            ('library=CUDA compute=8.6 name=CUDA0 driver=13.2', "13.2"),
                                            ("- NVIDIA driver: 12.8", "12.8")])
def test_a_cuda_version_under_the_drivers_label_is_the_drivers_cuda(line: str, cuda: str) -> None:
    got = facts(f"GPU: RTX 4090\n{line}\n")
    assert got["driver.cuda_version"] == cuda and got.get("driver.version") != cuda


@pytest.mark.parametrize("line", ["Driver Version: 550.54.15", "driver 535.104.05", "Driver memory 12.5 GB"])
def test_a_driver_version_or_a_size_is_no_cuda(line: str) -> None:
    got = facts(f"GPU: RTX 4090\n{line}\n")
    assert got.get("driver.cuda_version") in (None, "12.4", "12.2")  # derived from a real driver, never 12.5


# --- torch's CUDA start-up warning without an error number (cases5.toml 418)
@pytest.mark.parametrize("msg", [
    "CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable "
    "CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.",
    "CUDA driver initialization failed, you might not have a CUDA gpu.",
])
def test_torchs_start_up_warning_without_a_number(msg: str) -> None:
    got = facts(f"GPU: RTX 4090\n/env/torch/cuda/__init__.py:129: UserWarning: CUDA initialization: {msg} "
                "(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)\n")
    assert got["torch.cuda_available"] is False and str(got["torch.cuda_init_error"]).startswith("CUDA initialization")


# --- cuDNN's four-part release (cases5.toml 422, jtop)
@pytest.mark.parametrize(("line", "cudnn"), [(" - cuDNN: 9.3.0.75", "9.3.0"), ("cuDNN version: 8.9.2.26", "8.9.2"),
                                             ("cudnn 8.9.7", "8.9.7")])
def test_cudnn_four_part_release(line: str, cudnn: str) -> None:
    assert facts(f"GPU: Jetson AGX Orin\n{line}\n")["cudnn.version"] == cudnn


# --- release plans and build matrices are no machine (cases5.toml 423, 424; cases3.toml 222)
@pytest.mark.parametrize("text", [
    "### PyTorch 2.15 Version Support\n| Stable CUDA | CUDA 13.0 |\n",
    "- Adds CUDA `13.2.0` for the PyTorch 2.12 wheel line\n- Excludes `11.8` for PyTorch `2.11`\n",
    "- PyTorch `2.11` → `cu126`, `cu128`, `cu130`\n- PyTorch `2.12` → `cu126`, `cu130`, `cu132`\n",
    "pytorch nightly deprecate and remove cu128, and add cu132.\n",
])
def test_a_release_plan_or_build_matrix_is_refused(text: str) -> None:
    with pytest.raises(UsageError):
        facts(text)


def test_one_torch_index_tag_is_still_read() -> None:
    assert facts("GPU: RTX 4090\nPyTorch index: `cu121`\n")["torch.cuda"] == "12.1"
