"""Red-team pastes for the few-line report reader (reports/freeform.py): what people put in GitHub issues. A
wrong fact is worse than none (it makes rules fire wrongly), so each case names what must be read and what must
stay unknown; text that states two values of one fact (two machines, two attempts) leaves it unknown; and every
pattern stays linear on near-miss lines built from its own parse tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.errors import UsageError
from olmo_doctor.facts import FactValue
from olmo_doctor.report import load_report

CASES: list[tuple[str, str, dict[str, FactValue], tuple[str, ...]]] = [
    # Python's banner names the compiler Python was built with, not the one on PATH
    ("python-banner", "Python 3.10.12 (main, Nov 20 2023, 15:14:05) [GCC 11.4.0] on linux\ntorch 2.4.0",
     {"python.version": "3.10.12", "torch.version": "2.4.0"}, ("gcc.version",)),
    # torch.__config__.show() lists the compilers torch was built with
    ("torch-config", "torch 2.3.0\nPyTorch built with:\n  - GCC 9.3\n  - C++ Version: 201703\n  - CuDNN 8.9.2\n",
     {"torch.version": "2.3.0"}, ("gcc.version", "cudnn.version")),
    # two versions of one thing: which machine is judged is not said
    ("two-torches", "torch 2.1 vs torch 2.4: both fail on RTX 4090", {"gpu.0.name": "RTX 4090"}, ("torch.version",)),
    ("two-drivers", "driver 535.104 fails; driver 550.54.15 works\ntorch 2.4.0",
     {"torch.version": "2.4.0"}, ("driver.version",)),
    ("two-gpus", "works on A100 but fails on my RTX 3090, torch 2.4.0", {"torch.version": "2.4.0"},
     ("gpu.count", "gpu.0.name")),
    ("two-counts", "2x RTX 3090\n4 GPUs\ntorch 2.4.0", {"torch.version": "2.4.0"}, ("gpu.count", "gpu.0.name")),
    # a shorter form of the same value agrees with the longer one
    ("same-torch", "torch 2.4\n...\nPyTorch version: 2.4.0+cu121", {"torch.version": "2.4.0+cu121",
                                                                     "torch.cuda": "12.1"}, ()),
    # versions named in install commands and resolver errors are not what is installed
    ("pip-install", "pip install torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124\nRTX 4090",
     {"gpu.0.name": "RTX 4090"}, ("torch.version", "torch.cuda")),
    ("resolver", "ERROR: Could not find a version that satisfies the requirement torch==2.0.0 (from versions: 2.2.0)"
     "\nH100", {"gpu.0.name": "H100"}, ("torch.version",)),
    # a count after the name, or said apart from it
    ("count-after", "RTX A6000 x2, torch 2.2", {"gpu.count": 2, "torch.version": "2.2"}, ()),
    ("count-gpus", "8 GPUs (H100 80GB)", {"gpu.count": 8, "gpu.0.compute_capability": "9.0"}, ()),
    ("backticks-a10g", "torch: `2.4.0`, GPU: `A10G`", {"torch.version": "2.4.0", "gpu.0.compute_capability": "8.6"},
     ()),
    ("count-no-x", "2 nodes x 8 H100 train at half the speed of one node", {"gpu.count": 8}, ()),
    ("dash-memory", "4 x A100-SXM4-80GB", {"gpu.count": 4, "gpu.0.compute_capability": "8.0"}, ()),
    ("v100-dash", "Tesla V100-SXM2-32GB", {"gpu.count": 1, "gpu.0.compute_capability": "7.0"}, ()),
    # other tools' environment reports: Lightning lists one GPU per line, transformers and accelerate say "GPU type"
    ("lightning", "* CUDA:\n\t- GPU:\n\t\t- NVIDIA A100-SXM4-40GB\n\t\t- NVIDIA A100-SXM4-40GB\n\t- available: True\n"
     "* Packages:\n\t- torch:             2.2.0", {"gpu.count": 2, "torch.version": "2.2.0"}, ()),
    ("accelerate", "- `Accelerate` version: 0.33.0\n- PyTorch version (GPU?): 2.3.1+cu121 (True)\n"
     "- GPU type: NVIDIA H100 80GB HBM3", {"gpu.count": 1, "gpu.0.compute_capability": "9.0",
                                          "torch.version": "2.3.1+cu121"}, ()),
    # the CUDA torch was built with is not a torch version; `pip show` names the package on the line before
    ("cuda-used-to-build", "CUDA used to build PyTorch: 12.1", {"torch.cuda": "12.1"}, ("torch.version",)),
    ("pip-show", "Name: torchao\nVersion: 0.7.0\nSummary: Package for applying ao techniques\n---\nName: torch\n"
     "Version: 2.5.1", {"torchao.version": "0.7.0", "torch.version": "2.5.1"}, ()),
    # pip naming versions a Python would need, and a class of GPUs a message asks for, are not this machine's
    ("requires-python", "ERROR: Ignored the following versions that require a different python version: 2.9.0 "
     "Requires-Python >=3.10\ntorch 2.4.0", {"torch.version": "2.4.0"}, ("python.version",)),
    ("gpu-class", "torch 2.4.0\nbf16 is only supported on A100+ GPUs\nneeds an H100 or newer",
     {"torch.version": "2.4.0"}, ("gpu.count", "gpu.0.name")),
    # WSL2 stated, denied, or part of a path
    ("wsl2", "torch 2.4.0 on Windows 11 + WSL 2 Ubuntu", {"os.wsl": True}, ()),
    ("not-wsl2", "torch 2.4.0, native Ubuntu, not WSL2 (no WSL2 here, a non-WSL2 box)", {"torch.version": "2.4.0"},
     ("os.wsl",)),
    ("wsl2-path", "torch 2.4.0, data in /mnt/wsl2-data/x", {"torch.version": "2.4.0"}, ("os.wsl",)),
    # a cluster's size or a typo is no machine's GPU count
    ("cluster", "512x H100, torch 2.4.0", {"torch.version": "2.4.0"}, ("gpu.count", "gpu.0.name")),
    ("zero-count", "0x H100, torch 2.4.0", {"torch.version": "2.4.0"}, ("gpu.count", "gpu.0.name")),
    # a repr, a nightly with its CUDA tag, a conda list row with its wide columns
    ("repr", "torch.__version__ = '2.1.2+cu118'", {"torch.version": "2.1.2+cu118", "torch.cuda": "11.8"}, ()),
    ("nightly", "torch 2.6.0.dev20241112+cu124", {"torch.version": "2.6.0.dev20241112+cu124", "torch.cuda": "12.4"},
     ()),
    ("conda-row", "pytorch                   2.1.0           py3.10_cuda12.1_cudnn8.9.2_0    pytorch",
     {"torch.version": "2.1.0", "torch.cuda": "12.1"}, ()),
    # wrapping: CRLF, a quote, a fence, tabs, emoji
    ("wrapped", "> ```\r\n> torch\t2.5.1+cu124 🔥\r\n"
     "> NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4\r\n> ```\r\n",
     {"torch.version": "2.5.1+cu124", "driver.version": "550.54.15", "driver.cuda_version": "12.4"},
     ("gpu.count",)),
]


@pytest.mark.parametrize(("text", "expected", "unknown"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_pasted_lines_give_the_right_facts_and_leave_the_rest_unknown(
        tmp_path: Path, text: str, expected: dict[str, FactValue], unknown: tuple[str, ...]) -> None:
    path = tmp_path / "report.txt"
    path.write_text(text, encoding="utf-8", newline="")
    facts = load_report(path)
    assert {k: facts.get(k) for k in expected} == expected
    assert [k for k in unknown if k in facts] == []


def test_a_paste_stating_only_conflicting_values_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "report.txt"
    path.write_text("torch 2.1 vs torch 2.4 both fail\n")
    with pytest.raises(UsageError, match="not a report"):
        load_report(path)


def test_many_repeated_near_misses_read_only_what_they_state(tmp_path: Path) -> None:
    # (their reading time is tested in tests/doctor/test_report_linear.py, in CPU time at n and 4n)
    path = tmp_path / "report.txt"
    path.write_text("torch 2.4.0 [GCC 1.1] 8x GPUs A100 x9 torch 2.4 driver 5 nvcc 1.\n" * 20_000)
    facts = load_report(path)
    assert facts.get("torch.version") == "2.4.0"
    assert [k for k in ("gcc.version", "gpu.count", "driver.version", "nvcc.version") if k in facts] == []
