"""FlashAttention-3 branch split (olmo_doctor/build/branches_fa3.py) on a stand-in hopper/ tree written here with
the shapes the pinned source has (the nvcc tests in test_build_branches_fa3_nvcc.py compile the real one): which
files it writes, that the router's conditions are upstream's own, that each branch renames the launch functions
it fixes, and that a source of another shape is refused with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.build.branches import BranchSplitError
from olmo_doctor.build.branches_fa3 import CAUSAL, DENSE, FULL, LOCAL, VARLEN, branch_file, branches, split_fa3
from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.build.subset import MARKER, apply_subset

BWD = "instantiations/flash_bwd_hdim128_bf16_sm90.cu"
FWD = "instantiations/flash_fwd_hdim128_bf16_sm90.cu"
LAUNCH_BWD = """template <int Arch>
void run_flash_bwd(Flash_bwd_params &params, cudaStream_t stream) {}
template <int Arch, bool Is_causal, bool Is_local>
void run_mha_bwd_dispatch(Flash_bwd_params &params, cudaStream_t stream) {
    VARLEN_SWITCH(params.cu_seqlens_q != nullptr || params.cu_seqlens_k != nullptr, Varlen, [&] {
            BOOL_SWITCH(params.deterministic, Deterministic_, [&] {});
    });
}
template<int Arch, typename T, bool Has_softcap>
void run_mha_bwd_hdim64(Flash_bwd_params &params, cudaStream_t stream) {
    CAUSAL_LOCAL_SWITCH(params.is_causal, params.is_local, Is_causal, Is_local, [&] {});
}
template<int Arch, typename T, bool Has_softcap>
void run_mha_bwd_hdim128(Flash_bwd_params &params, cudaStream_t stream) {
    CAUSAL_LOCAL_SWITCH(params.is_causal, params.is_local, Is_causal, Is_local, [&] {});
}
"""
LAUNCH_FWD = """template<int Arch, typename T, int kHeadDim, int kHeadDimV, bool Split>
void run_mha_fwd_(Flash_fwd_params &params, cudaStream_t stream) {
    CAUSAL_LOCAL_SWITCH(params.is_causal, params.is_local, Is_causal, Is_local, [&] {
        VARLEN_SWITCH(params.cu_seqlens_q || params.seqused_k || params.leftpad_k, Varlen, [&] {});
    });
}
"""
UNIT_BWD = """#include "flash_bwd_launch_template.h"

#ifndef FLASHATTENTION_DISABLE_HDIM128
template<>
void run_mha_bwd_<90, cutlass::bfloat16_t, 128, false>(Flash_bwd_params &params, cudaStream_t stream) {
    run_mha_bwd_hdim128<90, cutlass::bfloat16_t, false>(params, stream);
}
#endif
"""
UNIT_FWD = """#include "flash_fwd_launch_template.h"
template void run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false>(Flash_fwd_params &params, cudaStream_t stream);
"""
SETUP = "    sources = (\n        [flash_api_source]\n        + sources_fwd_sm90\n    )\n"
INTERFACE = ("    flash_attn_3_gpu = torch.ops.flash_attn_3\n"
             "    q, k, k_new, v_new = [maybe_contiguous(x) for x in (q, k, k_new, v_new)]\n"
             "    dout, q, k, v, out = [maybe_contiguous(x) for x in (dout, q, k, v, out)]\n")


def _tree(tmp_path: Path, launch_bwd: str = LAUNCH_BWD) -> Path:
    hopper = tmp_path / "hopper"
    (hopper / "instantiations").mkdir(parents=True)
    for rel, text in {"flash_bwd_launch_template.h": launch_bwd, "flash_fwd_launch_template.h": LAUNCH_FWD,
                      BWD: UNIT_BWD, FWD: UNIT_FWD, "setup.py": SETUP, "flash_attn_interface.py": INTERFACE,
                      "static_switch.h": "#pragma once\n"}.items():
        (hopper / rel).write_text(text)
    return tmp_path


def test_backward_split_on_causal_local_writes_a_router_and_three_branches(tmp_path: Path) -> None:
    out = split_fa3(_tree(tmp_path), {BWD: ("bwd", ("causal_local",))})
    names = [branch_file(BWD, b) for b in branches(("causal_local",))]
    assert sorted(out) == sorted([BWD, "setup.py", *names])
    router = out[BWD]
    assert "template<>\nvoid run_mha_bwd_<90, cutlass::bfloat16_t, 128, false>(Flash_bwd_params &params" in router
    assert "(bool(params.is_causal))" in router and "(!bool(params.is_causal) && bool(params.is_local))" in router
    assert "run_mha_bwd_hdim128" not in router and "#include \"flash_bwd_launch_template.h\"" not in router
    local = out[branch_file(BWD, (LOCAL,))]
    for fn in ("run_flash_bwd", "run_mha_bwd_dispatch", "run_mha_bwd_hdim64", "run_mha_bwd_hdim128"):
        assert f"#define {fn} olmo_local_{fn}\n" in local  # every launch function the template defines
    fixed = "constexpr static bool CAUSAL_CONST_NAME = false; \\\n    constexpr static bool LOCAL_CONST_NAME = true;"
    assert fixed in local
    assert local.index("#define run_mha_bwd_hdim128") < local.index('#include "flash_bwd_launch_template.h"')
    assert "run_mha_bwd_hdim128<90, cutlass::bfloat16_t, false>(*static_cast<Flash_bwd_params *>(params)" in local
    assert '"instantiations/flash_bwd_hdim128_bf16_sm90_olmo_causal.cu"' in out["setup.py"]
    assert out["setup.py"].index("olmo_full.cu") < out["setup.py"].index("[flash_api_source]")


def test_varlen_split_uses_upstreams_condition_for_each_direction(tmp_path: Path) -> None:
    out = split_fa3(_tree(tmp_path), {BWD: ("bwd", ("causal_local", "varlen")),
                                      FWD: ("fwd", ("causal_local", "varlen"))}, local=False)
    assert len(branches(("causal_local", "varlen"), local=False)) == 4  # (causal, full) x (varlen, dense)
    assert branch_file(BWD, (LOCAL, DENSE)) not in out  # local attention disabled: no local kernels
    assert "bool(params.cu_seqlens_q != nullptr || params.cu_seqlens_k != nullptr)" in out[BWD]
    assert "bool(params.cu_seqlens_q || params.seqused_k || params.leftpad_k)" in out[FWD]
    fwd = out[branch_file(FWD, (CAUSAL, VARLEN))]
    assert "#define run_mha_fwd_ olmo_causal_varlen_run_mha_fwd_\n" in fwd
    assert "run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false>(*static_cast<Flash_fwd_params *>(params)" in fwd
    assert "template<>\nvoid run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false>(Flash_fwd_params" in out[FWD]
    assert "#define VARLEN_SWITCH(COND, CONST_NAME, ...)" in out[branch_file(BWD, (FULL, DENSE))]


@pytest.mark.parametrize("launch,match", [
    (LAUNCH_BWD.replace("params.is_local, Is_causal", "params.is_local2, Is_causal", 1), "one form of"),
    (LAUNCH_BWD.replace("run_mha_bwd_hdim128(", "run_mha_bwd_hdim_128("), "not defined there"),
])
def test_another_source_shape_is_refused(tmp_path: Path, launch: str, match: str) -> None:
    with pytest.raises(BranchSplitError, match=match):
        split_fa3(_tree(tmp_path, launch), {BWD: ("bwd", ("causal_local",))})
    with pytest.raises(BranchSplitError, match="cannot split"):
        branches(("softcap",))


def test_apply_subset_writes_nothing_when_the_split_fails(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    (tree / "hopper" / "setup.py").write_text("sources = [flash_api_source, other]\n")
    before = {p: p.read_text() for p in (tree / "hopper").rglob("*") if p.is_file()}
    with pytest.raises(BranchSplitError, match=r"setup\.py"):
        apply_subset(tree, find_recipe("flash-attn-3").subsets["olmo"], split=True)
    assert {p: p.read_text() for p in (tree / "hopper").rglob("*") if p.is_file()} == before
    assert not (tree / MARKER).exists()


def test_apply_subset_splits_what_the_recipe_names(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    files = apply_subset(tree, find_recipe("flash-attn-3").subsets["olmo"], split=True)
    assert files == sorted([BWD, *(branch_file(BWD, b) for b in branches(("causal_local",)))])
    assert (tree / "hopper" / FWD).read_text() == UNIT_FWD  # the recipe splits the backward file only
    assert "_olmo_doctor_subset_check(q, v)" in (tree / "hopper" / "flash_attn_interface.py").read_text()
    # the branches include the trimmed launch template: its deterministic switch is fixed to false
    assert "OLMO_FALSE_SWITCH(params.deterministic" in (tree / "hopper" / "flash_bwd_launch_template.h").read_text()
