"""Recommended env flags for several machines: exact arch lists, MAX_JOBS bounded by CPUs and memory."""

from __future__ import annotations

import pytest

from olmo_doctor.envplan import NVCC_JOB_GB, max_jobs, recommend
from olmo_doctor.facts import FactValue


def machine(ccs: list[tuple[str, str]], cpus: int, avail: float, **extra: FactValue) -> dict[str, FactValue]:
    facts: dict[str, FactValue] = {"gpu.count": len(ccs), "cpu.count": cpus, "mem.available_gb": avail,
                                "nvcc.version": "13.0", "nvcc.max_gcc": 15, "gcc.version": "13.3.0"}
    for i, (name, cc) in enumerate(ccs):
        facts[f"gpu.{i}.name"], facts[f"gpu.{i}.compute_capability"] = name, cc
    facts.update(extra)
    return facts


def test_h200_node() -> None:
    env = recommend(machine([("NVIDIA H200", "9.0")] * 8, cpus=128, avail=1800))
    assert env["TORCH_CUDA_ARCH_LIST"].value == "9.0"
    assert env["FLASH_ATTN_CUDA_ARCHS"].value == "90"
    assert env["MAX_JOBS"].value == "128"
    assert "CC" not in env and "CUDA_HOME" not in env


def test_mixed_ampere_ada_box_maps_both_to_flash_attn_80() -> None:
    env = recommend(machine([("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA GeForce RTX 4090", "8.9")], 32, 120))
    assert env["TORCH_CUDA_ARCH_LIST"].value == "8.0;8.9"
    assert env["FLASH_ATTN_CUDA_ARCHS"].value == "80"


def test_small_container_is_limited_by_memory() -> None:
    env = recommend(machine([("NVIDIA A10", "8.6")], cpus=4, avail=7.5))
    assert env["MAX_JOBS"].value == "1"


@pytest.mark.parametrize(("cpus", "avail"), [(1, 1.0), (2, 24.0), (16, 131.0), (64, 40.0), (8, 0.5)])
def test_max_jobs_never_exceeds_cpus_or_memory(cpus: int, avail: float) -> None:
    jobs = max_jobs({"cpu.count": cpus, "mem.available_gb": avail})
    assert jobs is not None and 1 <= jobs <= cpus
    assert jobs == 1 or jobs * NVCC_JOB_GB <= avail


def test_v100_with_cuda_13_gets_no_arch_it_cannot_build() -> None:
    env = recommend(machine([("Tesla V100-SXM2-32GB", "7.0")], 16, 100))
    assert "TORCH_CUDA_ARCH_LIST" not in env and "FLASH_ATTN_CUDA_ARCHS" not in env


def test_too_new_gcc_picks_an_older_one_on_path() -> None:
    gcc: dict[str, FactValue] = {
        "nvcc.version": "12.4", "nvcc.max_gcc": 13, "gcc.version": "14.2.0",
        "gcc.alternatives": ["12:/usr/bin/g++-12", "13:/usr/bin/g++-13", "14:/usr/bin/g++-14"]}
    facts = machine([("NVIDIA H100 80GB HBM3", "9.0")], 32, 200, **gcc)
    env = recommend(facts)
    assert env["CXX"].value == "/usr/bin/g++-13" and env["CC"].value == "/usr/bin/gcc-13"
    assert env["CUDAHOSTCXX"].value == "/usr/bin/g++-13"


def test_cuda_home_without_headers_points_at_the_real_toolkit() -> None:
    cuda: dict[str, FactValue] = {"cuda.home": "/usr/local", "cuda.home_has_headers": False,
                                  "cuda.toolkit_root": "/usr/local/cuda-13.0"}
    env = recommend(machine([], 2, 24, **cuda))
    assert env["CUDA_HOME"].value == "/usr/local/cuda-13.0"
