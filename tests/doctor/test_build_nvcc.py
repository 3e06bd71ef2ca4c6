"""A real nvcc compile (no GPU needed) with the arch flags each plan produces, checked with cuobjdump: the
object must hold SASS for exactly the planned architectures and nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cuda_toolkit, toolkit_marks

from olmo_doctor.build.plan import BuildRequest, plan_build
from olmo_doctor.build.recipes import find_recipe
from tests.machines import H200, RTX4090_WSL

KERNEL = "__global__ void axpy(float a, const float* x, float* y) { y[threadIdx.x] += a * x[threadIdx.x]; }\n"


def _tool(home: Path, name: str) -> str | None:
    """A CUDA binary tool: on PATH, in the toolkit, or from its PyPI wheel (nvidia-cuda-cuobjdump and
    nvidia-cuda-nvdisasm, dev extras; `cuobjdump -sass` needs nvdisasm)."""
    found = shutil.which(name) or (str(home / "bin" / name) if (home / "bin" / name).is_file() else None)
    if found:
        return found
    for base in map(Path, sys.path):
        for cand in base.glob(f"nvidia/cu*/bin/{name}"):
            return str(cand)
    return None


HOME = cuda_toolkit()
pytestmark = toolkit_marks()


def _compile(tmp: Path, flags: list[str]) -> tuple[set[str], str]:
    assert HOME is not None
    cuobjdump, nvdisasm = _tool(HOME, "cuobjdump"), _tool(HOME, "nvdisasm")
    if cuobjdump is None or nvdisasm is None:  # the dev extras install both: their absence is a broken install
        pytest.fail("cuobjdump/nvdisasm not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    env = {**os.environ, "NVDISASM_PATH": str(Path(nvdisasm).parent)}
    src = tmp / "axpy.cu"
    src.write_text(KERNEL)
    obj = tmp / "axpy.o"
    subprocess.run(
        [str(HOME / "bin" / "nvcc"), "-c", str(src), "-o", str(obj), *flags],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elf = subprocess.run([cuobjdump, "--list-elf", str(obj)], check=True, capture_output=True, text=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", str(obj)], capture_output=True, text=True).stdout
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], check=True, capture_output=True, text=True, env=env).stdout
    archs = {line.split(".")[-2] for line in elf.splitlines() if line.strip().endswith(".cubin")}
    assert "axpy" in sass and "FFMA" in sass  # real machine code for the kernel, not just a stub
    return archs, ptx


def _flash_attn_flags(facts: dict, **req) -> list[str]:
    fa = find_recipe("flash-attn")
    plan = plan_build(facts, fa, BuildRequest(package="flash-attn", **req))
    flags = []
    for token in plan.env["FLASH_ATTN_CUDA_ARCHS"].split(";"):
        flags += ["-gencode", fa.arch.gencode[token]]  # exactly what setup.py emits for the token
    return flags


def test_h200_plan_compiles_sm90_sass_only(tmp_path: Path) -> None:
    archs, ptx = _compile(tmp_path, _flash_attn_flags(H200))
    assert archs == {"sm_90"}
    assert ptx.strip() == ""  # flash-attn ships SASS only (code=sm_XX)


def test_rtx4090_plan_compiles_sm80_sass(tmp_path: Path) -> None:
    archs, _ = _compile(tmp_path, _flash_attn_flags(RTX4090_WSL))
    assert archs == {"sm_80"}  # runs on 8.9 (same major, higher minor)


def test_multi_arch_plan(tmp_path: Path) -> None:
    archs, _ = _compile(tmp_path, _flash_attn_flags(H200, archs=("8.0", "9.0", "12.0")))
    assert archs == {"sm_80", "sm_90", "sm_120"}


def test_xformers_plan_arch_list_goes_through_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils import cpp_extension

    xf = find_recipe("xformers")
    plan = plan_build(H200, xf, BuildRequest(package="xformers"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", plan.env["TORCH_CUDA_ARCH_LIST"])
    flags = cpp_extension._get_cuda_arch_flags()  # what torch passes to nvcc for this build
    archs, _ = _compile(tmp_path, flags)
    assert archs == {"sm_90a"}
