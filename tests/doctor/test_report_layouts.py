"""Every collect_env layout torch printed (0.4 to today) and every common way of pasting one is read to the same
facts: a table of real-shaped reports (tests/fixtures/reports/) and the facts each must give. Facts a report does
not state must stay unknown (absent from the result), not be invented or read as absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.facts import FactValue
from olmo_doctor.report import load_report
from tests.helpers import FIXTURES

REPORTS = FIXTURES / "reports"
A100 = {f"gpu.{i}.name": "NVIDIA A100-SXM4-40GB" for i in range(8)}
H100 = {f"gpu.{i}.name": "NVIDIA H100 80GB HBM3" for i in range(8)}

# file -> (facts it must give, keys it must leave unknown)
CASES: dict[str, tuple[dict[str, FactValue], set[str]]] = {
    # --- layouts, oldest first
    "torch0.4-pip-legacy.txt": (
        {"torch.version": "0.4.1", "torch.cuda": "9.0", "torch.cuda_available": True, "python.version": "3.6",
         "os.name": "Ubuntu 16.04.5 LTS", "gcc.version": "5.4.0", "nvcc.full_version": "9.0.176",
         "driver.version": "390.77", "gpu.count": 1, "gpu.0.name": "GeForce GTX 1080 Ti", "cudnn.version": "7.1.4"},
        {"glibc.version", "cpu.count", "os.arch", "os.conda_env", "ninja.version", "mem.total_gb"}),
    "torch1.0-four-gpus.txt": (
        {"torch.version": "1.0.0", "torch.cuda": "9.0", "gpu.count": 4, "gpu.3.name": "GeForce GTX 1080 Ti",
         "gcc.version": "4.8.5", "nvcc.version": "9.2", "driver.version": "396.44", "cudnn.version": "7.2.1",
         "os.name": "CentOS Linux 7 (Core)", "os.conda_env": "conda"},
        {"gpu.4.name", "cpu.count", "flash_attn.version"}),
    "torch1.3-macos-cpu.txt": (  # a Mac has no NVIDIA GPU CUDA can use: that much the OS line states
        {"torch.version": "1.3.1", "torch.cuda": None, "torch.cuda_available": False, "os.name": "Mac OSX 10.14.6",
         "python.version": "3.7", "gpu.count": 0},
        {"driver.version", "nvcc.version", "cudnn.version", "gcc.version"}),
    "torch1.7-rocm-line.txt": (
        {"torch.version": "1.7.0", "torch.cuda": "10.2", "python.version": "3.8", "os.arch": "x86_64",
         "nvcc.full_version": "10.2.89", "driver.version": "450.80.02", "gpu.0.name": "GeForce RTX 2080 Ti",
         "gpu.0.compute_capability": "7.5", "cudnn.version": "7.6.5"},
        {"glibc.version", "os.kernel"}),
    "torch1.8-windows.txt": (
        {"torch.version": "1.8.1+cu111", "torch.cuda": "11.1", "os.name": "Microsoft Windows 10 Pro",
         "python.version": "3.9", "driver.version": "466.11", "gpu.0.name": "GeForce RTX 3070",
         "cudnn.version": "8", "nvcc.full_version": "11.1.105"},
        {"gcc.version", "glibc.version", "cpu.count"}),
    "torch1.9-wsl2.txt": (
        {"torch.version": "1.9.0+cu111", "os.wsl": True, "os.kernel": "5.10.16.3-microsoft-standard-WSL2",
         "glibc.version": "2.31", "python.version": "3.8.10", "driver.version": "510.06",
         "gpu.0.name": "NVIDIA GeForce RTX 3080"},
        {"nvcc.version", "cudnn.version"}),
    "torch1.12-a100x8.txt": (
        {"torch.version": "1.12.1+cu113", "gpu.count": 8, **A100, "gpu.7.compute_capability": "8.0",
         "driver.version": "470.129.06", "python.version": "3.9.12", "glibc.version": "2.31"},
        {"gpu.8.name", "cudnn.version"}),
    "torch1.13-cudnn-list.txt": (
        {"torch.cuda": "11.7", "nvcc.version": "11.8", "cudnn.version": "8.6.0", "gpu.0.compute_capability": "8.9",
         "driver.version": "525.60.11", "driver.cuda_version": "11.8"},
        {"cpu.count"}),
    "torch2.0-v100-lscpu.txt": (
        {"torch.version": "2.0.1+cu118", "cpu.count": 40, "gpu.count": 2, "gpu.1.name": "Tesla V100-SXM2-32GB",
         "gpu.1.compute_capability": "7.0", "os.name": "Rocky Linux 8.8 (Green Obsidian)", "gcc.version": "8.5.0",
         "glibc.version": "2.28", "python.version": "3.10.12"},
        {"cudnn.version", "mem.total_gb"}),
    "torch2.1-cpu-build-on-gpu.txt": (
        {"torch.version": "2.1.2+cpu", "torch.cuda": None, "torch.cuda_available": False, "gpu.count": 1,
         "gpu.0.name": "NVIDIA GeForce RTX 3090", "driver.version": "535.54.03", "cpu.count": 24},
        {"nvcc.version"}),
    "torch2.2-conda-forge.txt": (
        {"torch.version": "2.2.0", "torch.cuda": "12.0", "gcc.version": "12.3.0", "python.version": "3.11.7",
         "gpu.0.name": "NVIDIA RTX A6000", "cpu.count": 64, "nvcc.full_version": "12.0.140"},
        {"torch.nccl"}),
    "torch2.5-macos-arm64.txt": (
        {"torch.version": "2.5.1", "torch.cuda": None, "os.name": "macOS 14.5", "os.arch": "arm64",
         "python.version": "3.12.4", "gpu.count": 0},
        {"cpu.count", "glibc.version", "gcc.version"}),
    "torch2.5-rocm.txt": (  # an AMD GPU: the NVIDIA GPU facts stay unknown, torch is not a CUDA build
        {"torch.version": "2.5.1+rocm6.2", "torch.cuda": None, "python.version": "3.10.12"},
        {"gpu.count", "gpu.0.name", "driver.version", "nvcc.version"}),
    "torch2.6-nightly-h100x8.txt": (
        {"torch.version": "2.6.0.dev20241112+cu124", "torch.cuda": "12.4", "gpu.count": 8, **H100,
         "cpu.count": 208, "torch.nccl": "2.21.5", "torch.cudnn": "9.1.0", "nvcc.full_version": "12.4.131"},
        {"gpu.8.name"}),
    "torch2.7-gh200-aarch64.txt": (
        {"torch.version": "2.7.0+cu128", "os.arch": "aarch64", "gpu.0.name": "NVIDIA GH200 480GB",
         "gpu.0.compute_capability": "9.0", "cpu.count": 72, "driver.version": "570.124.06",
         "os.kernel": "6.5.0-1019-nvidia-64k"},
        set()),
    "torch2.4-h100-a100-mixed.txt": (  # two GPU models in one box: each keeps its own name and architecture
        {"gpu.count": 4, "gpu.0.name": "NVIDIA H100 80GB HBM3", "gpu.0.compute_capability": "9.0",
         "gpu.3.name": "NVIDIA A100-SXM4-80GB", "gpu.3.compute_capability": "8.0", "cudnn.version": "9.1.0",
         "torch.nccl": "2.20.5", "cpu.count": 128, "driver.version": "550.90.07"},
        {"gpu.4.name", "flash_attn.version"}),
    "torch-not-importable.txt": (  # collect_env prints N/A when torch does not import: stated, not unknown
        {"torch.version": None, "gpu.0.name": "NVIDIA L40S", "driver.version": "560.35.03", "nvcc.version": "12.6"},
        {"torch.cuda", "torch.cuda_available"}),
    "issue-template-bullets.txt": (
        {"torch.version": "1.4.0", "os.name": "Ubuntu 18.04", "python.version": "3.7.5", "gpu.count": 2,
         "gpu.1.name": "RTX 2080 Ti", "gpu.1.compute_capability": "7.5"},
        {"torch.cuda", "driver.version", "nvcc.version"}),
    "partial-three-lines.txt": (
        {"torch.version": "2.7.1+cu126", "torch.cuda": "12.6", "torch.cuda_available": True},
        {"gpu.count", "python.version", "driver.version", "cpu.count", "os.name"}),
    # --- paste wrappings
    "paste-quoted.txt": ({"torch.version": "1.7.0", "gpu.0.name": "GeForce RTX 2080 Ti", "cudnn.version": "7.6.5"},
                         set()),
    "paste-quoted-nested.txt": ({"torch.version": "1.12.1+cu113", "gpu.count": 8, **A100}, set()),
    "paste-indented-4.txt": ({"torch.version": "2.0.1+cu118", "cpu.count": 40, "gpu.count": 2,
                              "gpu.1.name": "Tesla V100-SXM2-32GB"}, set()),
    "paste-tabs-crlf.txt": ({"torch.version": "1.9.0+cu111", "os.wsl": True, "gpu.0.name": "NVIDIA GeForce RTX 3080",
                             "python.version": "3.8.10"}, set()),
    "paste-html-escaped.txt": ({"torch.version": "1.13.1+cu117", "python.version": "3.10.6",
                                "gpu.0.name": "NVIDIA GeForce RTX 4090", "cudnn.version": "8.6.0"}, set()),
    "paste-details-fenced.txt": ({"torch.version": "2.6.0.dev20241112+cu124", "gpu.count": 8, **H100,
                                  "cpu.count": 208}, set()),
    "paste-numbered-gutter.txt": ({"torch.version": "2.7.0+cu128", "cpu.count": 72, "os.arch": "aarch64",
                                   "gpu.0.name": "NVIDIA GH200 480GB"}, set()),
    "paste-box-gutter.txt": ({"torch.version": "2.2.0", "gpu.0.name": "NVIDIA RTX A6000", "cpu.count": 64,
                              "os.name": "Ubuntu 22.04.3 LTS"}, set()),
    "paste-email-reply.txt": ({"torch.version": "0.4.1", "driver.version": "390.77", "gpu.count": 1}, set()),
    "paste-ansi-bom.txt": ({"torch.version": "2.5.1", "torch.cuda_available": False, "os.arch": "arm64"}, set()),
    "paste-with-nvidia-smi.txt": ({"torch.version": None, "driver.version": "560.35.03",
                                   "driver.cuda_version": "12.6", "gpu.0.name": "NVIDIA L40S"}, set()),
    "paste-no-colons.txt": (
        {"torch.version": "1.5.0", "torch.cuda": "10.2", "torch.cuda_available": True, "python.version": "3.7",
         "nvcc.full_version": "10.2.89", "gpu.0.name": "GeForce RTX 2070", "driver.version": "440.64",
         "cudnn.version": "7.6.5", "gcc.version": "7.5.0"},
        {"os.name"}),  # "OS Ubuntu" without a colon is too loose to read as a label
    "paste-fullwidth-colons.txt": (
        {"torch.version": "1.10.0+cu113", "torch.cuda": "11.3", "gpu.count": 2, "gpu.1.name": "NVIDIA GeForce RTX 3090",
         "driver.version": "470.82.01", "glibc.version": "2.31", "os.name": "Ubuntu 20.04.3 LTS"},
        {"cudnn.version"}),
    "paste-html-table.txt": (
        {"torch.version": "2.1.0+cu121", "torch.cuda": "12.1", "torch.cuda_available": True, "gpu.count": 1,
         "gpu.0.name": "NVIDIA A10G", "driver.version": "535.104.05"},
        {"python.version"}),
    "torch2.10-h100x8-torchao.txt": (  # collect_env lists torchao (its name holds "torch")
        {"torch.version": "2.10.0+cu128", "torchao.version": "0.18.0", "gpu.count": 8,
         "gpu.7.compute_capability": "9.0", "python.version": "3.12.3"},
        {"torchao.import_ok", "flash_attn.version"}),
    "with-pip-list-below.txt": (  # `pip list` pasted under the report: the packages we judge are read
        {"torch.version": "2.7.0+cu128", "flash_attn.version": "2.7.4.post1", "ninja.version": "1.11.1.4",
         "setuptools.version": "79.0.1"},
        {"xformers.version", "wheel.version"}),
    "paste-quoted-in-prose.txt": (  # quoted, though most lines of the comment are unquoted prose
        {"torch.version": "1.9.0+cu111", "os.wsl": True, "gpu.0.name": "NVIDIA GeForce RTX 3080"}, set()),
    "saved-report-fenced.txt": (  # an `olmo-doctor report` JSON in a ```json fence; null is a probed absence
        {"torch.version": "2.5.1+cu124", "gpu.count": 2, "gpu.1.name": "NVIDIA RTX A5000", "cpu.count": 32,
         "ninja.version": None},
        {"disk.free_gb", "glibc.version"}),
    "powershell-utf16.txt": (  # `collect_env > env.txt` in PowerShell writes UTF-16 with a byte-order mark
        {"torch.version": "1.8.1+cu111", "os.name": "Microsoft Windows 10 Pro", "gpu.0.name": "GeForce RTX 3070",
         "driver.version": "466.11"},
        {"gcc.version"}),
    "libraries-only.txt": (  # just the package part of a report
        {"torch.version": "2.3.1+cu121", "torch.cuda": "12.1", "torch.nccl": "2.20.5"},  # CUDA from the wheel tag
        {"gpu.count", "python.version"}),
    "paste-markdown-table.txt": (
        {"torch.version": "2.4.0+cu121", "torch.cuda": "12.1", "os.arch": "x86_64", "python.version": "3.11.9",
         "gpu.0.name": "NVIDIA L4", "gpu.0.compute_capability": "8.9", "driver.version": "550.54.15"},
        {"cpu.count"}),
}


def test_every_fixture_is_in_the_table() -> None:
    assert sorted(p.name for p in REPORTS.glob("*.txt")) == sorted(CASES)
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_report_gives_its_facts(name: str) -> None:
    expected, unknown = CASES[name]
    facts = load_report(REPORTS / name)
    for key, value in expected.items():
        assert key in facts, f"{name}: {key} not read"
        assert facts[key] == value, f"{name}: {key}"
    for key in unknown:
        assert key not in facts, f"{name}: {key} = {facts[key]!r} though the report does not state it"
    assert facts["facts.partial"] is True
    count = facts.get("gpu.count")
    if isinstance(count, int):  # a listing gives every GPU's name, never more
        assert all(f"gpu.{i}.name" in facts for i in range(count))
        assert f"gpu.{count}.name" not in facts


def test_wrapping_does_not_change_what_is_read(tmp_path: Path) -> None:
    # each paste-* fixture wraps one of the plain layouts; the facts must be the same
    pairs = {"paste-quoted.txt": "torch1.7-rocm-line.txt", "paste-quoted-nested.txt": "torch1.12-a100x8.txt",
             "paste-indented-4.txt": "torch2.0-v100-lscpu.txt", "paste-tabs-crlf.txt": "torch1.9-wsl2.txt",
             "paste-html-escaped.txt": "torch1.13-cudnn-list.txt",
             "paste-details-fenced.txt": "torch2.6-nightly-h100x8.txt",
             "paste-numbered-gutter.txt": "torch2.7-gh200-aarch64.txt",
             "paste-box-gutter.txt": "torch2.2-conda-forge.txt",
             "paste-email-reply.txt": "torch0.4-pip-legacy.txt", "paste-ansi-bom.txt": "torch2.5-macos-arm64.txt"}
    for wrapped, plain in pairs.items():
        assert load_report(REPORTS / wrapped) == load_report(REPORTS / plain), wrapped


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("GPU 0: NVIDIA GeForce RTX 4090", ["NVIDIA GeForce RTX 4090"]),
        ("NVIDIA GeForce RTX 4090", ["NVIDIA GeForce RTX 4090"]),  # macOS/ROCm style: one bare name
        ("Quadro RTX 8000", ["Quadro RTX 8000"]),
        ("2x RTX 2080 Ti", ["RTX 2080 Ti"] * 2),
        ("8 x NVIDIA A100-SXM4-80GB", ["NVIDIA A100-SXM4-80GB"] * 8),
        ("4*V100", ["V100"] * 4),
        ("NVIDIA H100 80GB HBM3 x 8", ["NVIDIA H100 80GB HBM3"] * 8),
        ("RTX 3090 ×2", ["RTX 3090"] * 2),
        ("GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-0f2c1a34-1111-2222-3333-444455556666)", ["Tesla V100-SXM2-16GB"]),
        ("GPU 0 GeForce RTX 2070", ["GeForce RTX 2070"]),
        ("Could not collect", []),
        ("No CUDA", []),
    ],
)
def test_gpu_listing_values(tmp_path: Path, value: str, names: list[str]) -> None:
    path = tmp_path / "collect_env.txt"
    path.write_text(f"PyTorch version: 2.5.1+cu124\nCUDA used to build PyTorch: 12.4\n"
                    f"GPU models and configuration: {value}\nNvidia driver version: 550.54.15\n")
    facts = load_report(path)
    assert facts.get("gpu.count") == (len(names) or None)
    assert [facts[f"gpu.{i}.name"] for i in range(len(names))] == names


def test_mig_devices_are_not_gpus(tmp_path: Path) -> None:
    path = tmp_path / "collect_env.txt"
    path.write_text("PyTorch version: 2.5.1+cu124\nGPU models and configuration: \n"
                    "GPU 0: NVIDIA A100-SXM4-80GB\n  MIG 3g.40gb     Device  0:\n  MIG 3g.40gb     Device  1:\n"
                    "GPU 1: NVIDIA A100-SXM4-80GB\n\nNvidia driver version: 550.54.15\n")
    facts = load_report(path)
    assert facts["gpu.count"] == 2 and facts["gpu.1.name"] == "NVIDIA A100-SXM4-80GB"


@pytest.mark.parametrize(
    ("value", "driver"),
    [("535.104.05", "535.104.05"), ("466.11", "466.11"), ("31.0.15.3699", "536.99"), ("27.21.14.5671", "456.71"),
     ("Could not collect", None), ("No CUDA", None)],
)
def test_driver_versions(tmp_path: Path, value: str, driver: str | None) -> None:
    path = tmp_path / "collect_env.txt"
    path.write_text(f"PyTorch version: 2.5.1+cu124\nIs CUDA available: True\nNvidia driver version: {value}\n")
    assert load_report(path).get("driver.version") == driver
