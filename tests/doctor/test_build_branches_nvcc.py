"""The branch split's generated files compile with the real nvcc for sm_90 (no GPU needed): a router and one
branch file of the real flash-attn 2.8.3.post2 sdist after `--subset olmo`, checked with nm for the symbols
that tie them together (router defines what flash_api.cpp calls and needs the branch entry; the branch defines
it, with its kernels in a namespace of its own). Marked slow and network (it downloads the sdist, which fails
loudly without the registry); skipped only where no CUDA toolkit is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import cuda_toolkit, toolkit_marks

from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.build.source import fetch_sdist
from olmo_doctor.build.subset import apply_subset
from olmo_doctor.errors import UsageError

FA = find_recipe("flash-attn")
OLMO = FA.subsets["olmo"]
# the nvcc flags flash-attn 2.8.3.post2's setup.py passes (besides include dirs), for one arch
SETUP_FLAGS = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr",
               "--expt-extended-lambda", "--use_fast_math", "--threads", "1"]
UNIT = "csrc/flash_attn/src/flash_bwd_hdim128_bf16_causal_sm80"

pytestmark = [*toolkit_marks(), pytest.mark.network]
NVCC = (cuda_toolkit() or Path("/usr/local/cuda")) / "bin" / "nvcc"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        sdist = fetch_sdist(FA, sys.executable)
    except UsageError as e:  # a network test without the network: fail loudly, never skip
        pytest.fail(f"flash-attn sdist not available (a `network` test): {e}")
    dest = tmp_path_factory.mktemp("fa")
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    root = dest / "flash_attn-2.8.3.post2"
    apply_subset(root, OLMO, split=True)
    return root


def _includes(tree: Path, tmp: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths

    dirs = [tree / "csrc/flash_attn", tree / "csrc/flash_attn/src", tree / "csrc/cutlass/include",
            *map(Path, include_paths())]
    # a CPU-only torch wheel ships the c10/cuda headers but not this generated one; its content is one macro
    stub = tmp / "stub"
    if not any((d / "c10/cuda/impl/cuda_cmake_macros.h").is_file() for d in dirs):
        (stub / "c10/cuda/impl").mkdir(parents=True)
        (stub / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n")
        dirs.append(stub)
    return [f"-I{d}" for d in dirs]


def _compile(tree: Path, tmp: Path, src: str) -> str:
    obj = tmp / (Path(src).stem + ".o")
    defines = [f"-D{d}" for d in OLMO.defines]
    proc = subprocess.run(
        [str(NVCC), "-c", str(tree / src), "-o", str(obj), *_includes(tree, tmp), *SETUP_FLAGS, *defines,
         "-gencode", FA.arch.gencode["90"], "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda", "-D_GLIBCXX_USE_CXX11_ABI=1"],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to read the compiled symbols"
    return subprocess.run([nm, "-C", str(obj)], check=True, capture_output=True, text=True).stdout


def test_router_compiles_and_calls_its_branches(tree: Path, tmp_path: Path) -> None:
    syms = _compile(tree, tmp_path, UNIT + ".cu")
    assert " T void flash::run_mha_bwd_<cutlass::bfloat16_t, 128, true>(flash::Flash_bwd_params&" in syms
    for branch in ("even", "uneven"):
        assert f" U olmo_flash_bwd_hdim128_bf16_causal_sm80_{branch}(void*, CUstream_st*)" in syms
    assert "flash_bwd_dq_dk_dv_loop" not in syms  # no kernels in the router


def test_branch_file_compiles_its_kernels_in_its_own_namespace(tree: Path, tmp_path: Path) -> None:
    syms = _compile(tree, tmp_path, UNIT + "_olmo_uneven.cu")
    assert " T olmo_flash_bwd_hdim128_bf16_causal_sm80_uneven(void*, CUstream_st*)" in syms
    kernels = [ln for ln in syms.splitlines() if "::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<" in ln]
    assert kernels and all("flash_olmo_uneven::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<" in ln for ln in kernels)
    # the kernel's last seven template arguments: Is_dropout, Is_causal, Is_local, Has_alibi, Is_even_MN,
    # Is_even_K, Is_softcap; the uneven branch holds only the Is_even_MN=false instantiation
    assert all("false, true, false, false, false, true, false>" in ln for ln in kernels), kernels
