"""The machines tests judge, one definition each (dotted fact keys from olmo_doctor/facts.py).

H200 is a real machine: the facts `olmo-doctor check --json` gathered on an H200 host (NVIDIA H200, driver
580.159.04, torch 2.11.0+cu130, nvcc 13.0, gcc 13.3 behind CC/CXX=/opt/gcc, Ubuntu 24.04), kept in
tests/fixtures/machines/h200-check/check.json; H200_CAPTURE is the same host's raw captures (collect_env.txt,
env.txt, torch.txt), the input of the report tests. H200_GPU is its GPU and torch facts alone, for the tests of
what is printed about them. The others are typical configurations written out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from olmo_doctor.facts import Facts

MACHINE_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "machines"
H200_CAPTURE = MACHINE_FIXTURES / "h200"  # collect_env.txt, env.txt, torch.txt of a real H200 host
H200_CHECK = MACHINE_FIXTURES / "h200-check" / "check.json"

H200: Facts = json.loads(H200_CHECK.read_text())["facts"]
H200_GPU: Facts = {k: v for k, v in H200.items() if k.startswith("gpu.") or k in ("torch.version",
                                                                                 "torch.cuda_available")}


def _base(**over: object) -> Facts:
    facts: Facts = {
        "gpu.count": 1,
        "gpu.source": "report",
        "torch.version": "2.11.0+cu130",
        "torch.cuda": "13.0",
        "torch.cxx11abi": True,
        "nvcc.version": "13.0",
        "cuda.home": "/usr/local/cuda",
        "cuda.home_has_headers": True,
        "gcc.path": "/usr/bin/g++",
        "gcc.version": "13.3.0",
        "python.version": "3.12.3",
        "python.executable": "/opt/venv/bin/python3",
        "ninja.path": "/opt/venv/bin/ninja",
        "ninja.version": "1.13.2",
        "os.arch": "x86_64",
        "os.wsl": False,
    }
    facts.update(over)  # type: ignore[arg-type]
    return facts


A100 = _base(
    **{
        "gpu.count": 8,
        "torch.version": "2.8.0+cu128",
        "torch.cuda": "12.8",
        "nvcc.version": "12.8",
        **{f"gpu.{i}.name": "NVIDIA A100-SXM4-80GB" for i in range(8)},
        **{f"gpu.{i}.compute_capability": "8.0" for i in range(8)},
        "cpu.count": 256,
        "mem.total_gb": 2164.0,
        "mem.available_gb": 2000.0,
        "gcc.version": "11.4.0",
        "python.version": "3.10.12",
    }
)

RTX4090_WSL = _base(
    **{
        "gpu.0.name": "NVIDIA GeForce RTX 4090",
        "gpu.0.compute_capability": "8.9",
        "os.wsl": True,
        "cpu.count": 24,
        "mem.total_gb": 33.5,
        "mem.available_gb": 30.1,
        "torch.version": "2.9.1+cu128",
        "torch.cuda": "12.8",
        "nvcc.version": "12.8",
        "python.version": "3.11.9",
    }
)

V100_CUDA13 = _base(
    **{
        "gpu.count": 4,
        **{f"gpu.{i}.name": "Tesla V100-SXM2-32GB" for i in range(4)},
        **{f"gpu.{i}.compute_capability": "7.0" for i in range(4)},
        "cpu.count": 40,
        "mem.total_gb": 512.0,
        "mem.available_gb": 480.0,
    }
)

# an 8 GB / 4 CPU container (cgroup limits) on a 64-core host with an H100
CONTAINER_8GB = _base(
    **{
        "gpu.0.name": "NVIDIA H100 80GB HBM3",
        "gpu.0.compute_capability": "9.0",
        "os.container": "docker",
        "cpu.count": 4,
        "cpu.physical_count": 64,
        "mem.cgroup_limit_gb": 8.0,
        "mem.total_gb": 8.0,
        "mem.available_gb": 7.4,
    }
)

CPU_ONLY = _base(
    **{
        "gpu.count": 0,
        "gpu.source": "none",
        "torch.version": "2.13.0+cpu",
        "torch.cuda": None,
        "cpu.count": 2,
        "mem.total_gb": 24.0,
        "mem.available_gb": 22.0,
    }
)

MACHINES = {
    "h200": H200,
    "a100": A100,
    "rtx4090-wsl": RTX4090_WSL,
    "v100-cuda13": V100_CUDA13,
    "container-8gb": CONTAINER_8GB,
}


# this dev machine: no GPU, CPU torch, nvcc 13.0 behind a /usr/local/bin wrapper, gcc 12, glibc 2.36
CPU_DEV: Facts = {
    "gpu.count": 0,
    "gpu.source": "none",
    "nvcc.path": "/usr/local/bin/nvcc",
    "nvcc.on_path": "/usr/local/bin/nvcc",
    "nvcc.version": "13.0",
    "nvcc.max_gcc": 15,
    "cuda.home": "/usr/local",
    "cuda.home_nvcc_version": "13.0",
    "cuda.home_has_headers": False,
    "cuda.toolkit_root": "/usr/local/cuda-13.0",
    "gcc.version": "12.2.0",
    "glibc.version": "2.36",
    "libstdcxx.glibcxx_max": "3.4.30",
    "python.version": "3.11.7",
    "torch.version": "2.13.0+cpu",
    "plan.device": "cpu",
}
