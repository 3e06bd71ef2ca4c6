"""The families behind the misses of the sixth report corpus (tests/fixtures/report_corpus/cases6.toml, 13/25 on its
first run), each in several wordings with the near misses that must not be read. Where a case comes from is named
beside it; the others are the same tool's output or sentence written another way.
"""

from __future__ import annotations

import pytest
from helpers import report_facts

from olmo_doctor.errors import UsageError

facts = report_facts


# --- Stable Diffusion web UI's Python check (cases6.toml 502, AUTOMATIC1111)
@pytest.mark.parametrize("line", ["This program is tested with 3.10.6 Python, but you have 3.13.5.",
                                  "This program is tested with Python 3.10.6, but you have Python 3.13.5"])
def test_the_python_you_have(line: str) -> None:
    assert facts(line + "\n")["python.version"] == "3.13.5"


# --- a logger's timestamps inside a line (cases6.toml 504, ComfyUI's log)
@pytest.mark.parametrize("stamp", ["2025-11-27T00:45:36.445695 - ", "2025-11-27 00:45:36,445 - ",
                                   "2025-11-27T00:45:36Z - "])
def test_timestamps_between_a_label_and_its_value(stamp: str) -> None:
    got = facts(f"{stamp}** Python version:{stamp} {stamp}3.13.9 (tags/v3.13.9:8183fa5, Oct 14 2025)\n"
                f"{stamp}** Platform: Windows\n")
    assert got["python.version"] == "3.13.9"


# --- versions standing in file names and GPUs written as model numbers (cases6.toml 506, 520)
@pytest.mark.parametrize(("line", "driver"), [("driver: NVIDIA-Linux-x86_64-535.171.04.run", "535.171.04"),
                                              ("installed NVIDIA-Linux-aarch64-570.86.15.run", "570.86.15")])
def test_the_drivers_installer_names_it(line: str, driver: str) -> None:
    assert facts(f"GPU: RTX 4090\n{line}\n")["driver.version"] == driver


@pytest.mark.parametrize(("text", "count", "cc"), [("can't run model in nvidia 4090d", 1, "8.9"),
                                                   ("one machine with x2 4090Ds", 2, "8.9"),
                                                   ("a box with x2 3090s", 2, "8.6"), ("NVIDIA 3090 here", 1, "8.6")])
def test_model_numbers_after_the_vendor_or_a_count(text: str, count: int, cc: str) -> None:
    got = facts(text + "\n")
    assert got["gpu.count"] == count and got["gpu.0.compute_capability"] == cc


# --- two builds side by side in one table (cases6.toml 508, sglang)
def test_a_row_comparing_two_builds_is_no_machines_value() -> None:
    text = ("| | build A | build B |\n|---|---|---|\n| CUDA toolkit (NVCC) | 12.9 (V12.9.86) | 13.0 (V13.0.88) |\n"
            "| GPU | NVIDIA H20 | NVIDIA H20 |\n")
    assert "nvcc.version" not in facts(text)


def test_a_two_column_table_is_still_read() -> None:
    assert facts("| package | version |\n|---|---|\n| torch | 2.4.0+cu121 |\n")["torch.version"] == "2.4.0+cu121"


# --- torch's CUDA said beside it, and a torch that fails to import (cases6.toml 509, pytorch)
@pytest.mark.parametrize(("line", "cuda"), [("torch 2.5.0 stable from pip with cuda 12.4", "12.4"),
                                            ("PyTorch 2.1.0 with CUDA 11.8 on Ubuntu", "11.8"),
                                            ("torch 2.1 and the CUDA toolkit with cuda 12.1", None)])
def test_torchs_cuda_beside_its_version(line: str, cuda: str | None) -> None:
    assert facts(f"{line}\nGPU: RTX 4090\n").get("torch.cuda") == cuda


def test_a_traceback_through_torchs_own_files_is_torch_failing_to_import() -> None:
    text = (">>> import torch\nTraceback (most recent call last):\n"
            '  File "/usr/local/lib64/python3.9/site-packages/torch/__init__.py", line 300, in _load_global_deps\n'
            "    ctypes.CDLL(global_deps_lib_path, mode=ctypes.RTLD_GLOBAL)\n"
            "OSError: libcudart.so.12: cannot open shared object file: No such file or directory\n")
    assert "libcudart.so.12" in str(facts(text)["torch.import_error"])


# --- a command's bare answer on the next line (cases6.toml 515)
@pytest.mark.parametrize(("cmd", "arch"), [("> uname -m && cat /etc/*release", "x86_64"), ("$ uname -m", "aarch64")])
def test_uname_ms_answer(cmd: str, arch: str) -> None:
    assert facts(f"GPU: RTX 4090\n{cmd}\n{arch}\nDISTRIB_ID=Pop\n")["os.arch"] == arch


# --- what only looks like a statement (cases6.toml 523, 524; cases5.toml 513)
def test_an_unfilled_templates_examples_are_refused() -> None:
    with pytest.raises(UsageError):
        facts(" - OS: [e.g. Ubuntu 18.04]\n - GPU count and types [e.g. two machines with x8 A100s each]\n"
              " - Python version [e.g. 3.8]\n")


@pytest.mark.parametrize("text", [
    "xformers 0.0.33's wheel hard-pins `torch==2.9.0` (not `~=` or `>=`).",
    "... from sympy>=1.13.3 -> torch==2.9.0 -> xformers==0.0.33 -> -r requirements/full/requirements.txt (line 35)",
    "The wizard's PyTorch step installs `torch==2.9.1+cu128` via `get_pytorch_update_command`.",
])
def test_what_a_package_or_a_script_pins_is_no_machine(text: str) -> None:
    with pytest.raises(UsageError):
        facts(text + "\n")


@pytest.mark.parametrize(("line", "key", "value"), [("cuDNN version: 8700", "torch.cudnn", "8.7.0"),
                                                    ("cuDNN version: 90100", "torch.cudnn", "9.1.0"),
                                                    ("cuDNN version: 8.9.2", "cudnn.version", "8.9.2")])
def test_an_integer_cudnn_is_torchs(line: str, key: str, value: str) -> None:
    got = facts(f"PyTorch version: 2.0.1+cu118\n{line}\n")
    assert got[key] == value
