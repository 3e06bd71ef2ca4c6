"""The `--subset olmo` transformation applied to the REAL flash-attn 2.8.3.post2 sdist (downloaded with pip,
sha256 checked: those tests are marked `network` and fail, saying why, when the registry cannot be reached)."""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

from olmo_common.bounded.files import sha256_file
from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.build.source import fetch_sdist, fingerprint, prepare
from olmo_doctor.build.subset import (
    MARKER,
    SubsetError,
    apply_subset,
    flash_attn_2_sources,
    subset_error_text,
)
from olmo_doctor.errors import UsageError

FA = find_recipe("flash-attn")
OLMO = FA.subsets["olmo"]


@pytest.fixture(scope="module")
def sdist() -> Path:
    try:
        return fetch_sdist(FA, sys.executable)
    except UsageError as e:  # a network test without the network: fail loudly, never skip
        pytest.fail(f"flash-attn sdist not available (a `network` test): {e}")


@pytest.fixture()
def tree(sdist: Path, tmp_path: Path) -> Path:
    """setup.py and csrc/flash_attn/ of the real sdist (what the transformation reads; CUTLASS left out)."""
    with tarfile.open(sdist) as tar:
        keep = [m for m in tar.getmembers() if m.name.split("/", 1)[-1] == "setup.py" or "/csrc/flash_attn/" in m.name]
        tar.extractall(tmp_path, members=keep, filter="data")
    return tmp_path / "flash_attn-2.8.3.post2"


@pytest.mark.network
def test_sdist_is_the_pinned_one(sdist: Path) -> None:
    assert sha256_file(sdist) == FA.sha256


@pytest.mark.network
def test_subset_keeps_7_translation_units(tree: Path) -> None:
    assert len(flash_attn_2_sources((tree / "setup.py").read_text())) == 73  # upstream: 72 .cu + api
    units = apply_subset(tree, OLMO, split=False)
    assert len(units) == 7
    assert units[0] == "csrc/flash_attn/flash_api.cpp"
    names = sorted(Path(u).name for u in units[1:])
    assert names == sorted(
        f"flash_{d}_hdim128_bf16{c}_sm80.cu" for d in ("fwd", "fwd_split", "bwd") for c in ("", "_causal")
    )
    assert all((tree / u).is_file() for u in units)
    setup = (tree / "setup.py").read_text()
    assert flash_attn_2_sources(setup) == units
    for define in OLMO.defines:  # passed to nvcc and to the host compiler (flash_api.cpp has the checks)
        assert f'"-D{define}"' in setup
    assert "compiler_c17_flag = compiler_c17_flag + _subset_defines" in setup
    compile(setup, "setup.py", "exec")  # still valid Python


@pytest.mark.network
def test_branch_split_routes_the_backward_files(tree: Path) -> None:
    """The same 7 units; the backward files (the recipe's split_directions) each split into a router + one file
    per branch it can reach (causal: even and uneven lengths; non-causal: + sliding window), in namespaces of
    their own, with runtime agreement checks."""
    assert OLMO.split_directions == ("bwd",)
    files = apply_subset(tree, OLMO)  # the recipe splits by default
    assert len(files) == OLMO.compile_units == 12 and files[0] == "csrc/flash_attn/flash_api.cpp"
    setup = (tree / "setup.py").read_text()
    assert flash_attn_2_sources(setup) == files
    compile(setup, "setup.py", "exec")
    kernel_files = [f for f in files if f.endswith("_sm80.cu")]
    assert len(kernel_files) == 6
    branch_files = [f for f in files if "_olmo_" in f]
    assert len(branch_files) == 5 and files.index(branch_files[-1]) < files.index(kernel_files[0])  # long jobs first
    for unit in kernel_files:
        if "_bwd_" not in unit:  # forward files compile whole, untouched
            assert "olmo-doctor" not in (tree / unit).read_text()
            continue
        router = (tree / unit).read_text()
        causal = "_causal_" in unit
        names = ["even", "uneven"] + ([] if causal else ["local"])
        assert sorted(f.rsplit("_olmo_", 1)[1][:-3] for f in branch_files if f.startswith(unit[:-3])) == sorted(names)
        assert "template<>" in router and "#include \"flash.h\"" in router and "launch_template" not in router
        assert ("window_size_left >= 0" in router) == (not causal)
        assert "seqlen_q % 256 == 0 && params.seqlen_k % 256 == 0" in router
        for name in names:
            branch = (tree / f"{unit[:-3]}_olmo_{name}.cu").read_text()
            assert f"#define FLASH_NAMESPACE flash_olmo_{name}" in branch
            assert f"#define OLMO_PART_EVEN_MN {int(name == 'even')}" in branch
            assert f"#define OLMO_PART_LOCAL {int(name == 'local')}" in branch
            assert f"void olmo_{Path(unit).stem}_{name}(void *params, cudaStream_t stream)" in router
    src = tree / "csrc/flash_attn/src"
    assert (src / "flash_fwd_launch_template.h").read_text().count("EVENMN_SWITCH(is_even_MN") == 2
    assert (src / "flash_bwd_launch_template.h").read_text().count("EVENMN_SWITCH(is_even_MN") == 1
    assert "BOOL_SWITCH(is_even_MN" not in (src / "flash_fwd_launch_template.h").read_text()
    switch = (src / "static_switch.h").read_text()
    assert "#define EVENMN_SWITCH BOOL_SWITCH" in switch and "TORCH_CHECK(bool(COND) == bool(OLMO_PART_LOCAL)" in switch
    assert json.loads((tree / MARKER).read_text())["split_branches"] is True
    with pytest.raises(SubsetError, match="split_branches True"):
        apply_subset(tree, OLMO, split=False)  # a split tree is not reused for an unsplit build


@pytest.mark.network
def test_dispatch_and_runtime_checks(tree: Path) -> None:
    apply_subset(tree, OLMO)
    switch = (tree / "csrc/flash_attn/src/static_switch.h").read_text()
    fp16, hdim = (m.group(0) for m in re.finditer(r"#define (?:FP16|HEADDIM)_SWITCH.*?\}\(\)", switch, re.S))
    assert "cutlass::half_t" not in fp16 and "cutlass::bfloat16_t" in fp16
    assert re.findall(r"kHeadDim = (\d+)", hdim) == ["128"]
    assert all(line.endswith("\\") for line in hdim.splitlines()[:-1])  # still one macro
    assert "#define BOOL_SWITCH" in switch and "#ifdef FLASHATTENTION_DISABLE_LOCAL" in switch  # untouched
    api = (tree / "csrc/flash_attn/flash_api.cpp").read_text()
    # messages built with std::string: TORCH_CHECK's ("text", value) form formats through std::ostream in the
    # extension, which crashed (SIGSEGV in num_put) when built by a toolchain linking libstdc++ statically
    assert (f'TORCH_CHECK(q.dtype() == torch::kBFloat16, std::string("{subset_error_text(OLMO, "dtype")}") + '
            "c10::toString(q.scalar_type()));") in api
    assert f'TORCH_CHECK(d == 128, std::string("{subset_error_text(OLMO, "head dim")}") + std::to_string(d));' in api
    # the checks sit in set_params_fprop, which forward, varlen, kv-cache and backward all call
    body = api[api.index("void set_params_fprop(") : api.index("void set_params_dgrad(")]
    assert "olmo-doctor --subset olmo" in body and api.count("olmo-doctor --subset olmo) has kernels") == 2


@pytest.mark.network
def test_idempotent_and_refuses_another_subset(tree: Path) -> None:
    first = apply_subset(tree, OLMO)
    before = (tree / "setup.py").read_text()
    assert apply_subset(tree, OLMO) == first and (tree / "setup.py").read_text() == before
    other = type(OLMO)(**{**OLMO.__dict__, "name": "other"})
    with pytest.raises(SubsetError, match="already carries subset 'olmo'"):
        apply_subset(tree, other)


@pytest.mark.network
def test_unknown_source_fails_loudly_and_leaves_tree_untouched(tree: Path) -> None:
    api = tree / "csrc/flash_attn/flash_api.cpp"
    api.write_text(api.read_text().replace("params.is_bf16 = q.dtype() == torch::kBFloat16;", "params.is_bf16 = x;"))
    setup_before = (tree / "setup.py").read_text()
    with pytest.raises(SubsetError, match=r"flash_api\.cpp: expected one match"):
        apply_subset(tree, OLMO)
    assert (tree / "setup.py").read_text() == setup_before and not (tree / MARKER).exists()


@pytest.mark.network
def test_prepare_copies_and_catches_a_checkout_without_submodules(sdist: Path, tree: Path, tmp_path: Path) -> None:
    (tree / "csrc" / "cutlass").mkdir()  # what `git clone` without --recursive leaves: an empty folder
    (tree / ".git").mkdir()
    with pytest.raises(UsageError, match="git submodule update --init csrc/cutlass"):
        prepare(FA, str(tree), tmp_path / "work", sys.executable)
    got = prepare(FA, str(sdist), tmp_path / "work2", sys.executable)  # a local sdist file
    assert (got / FA.submodule_marker).is_file() and got == tmp_path / "work2" / "src"


def test_flash_attention_3_checkout_layout(tmp_path: Path) -> None:
    fa3 = find_recipe("flash-attn-3")
    repo = tmp_path / "flash-attention"
    (repo / "hopper").mkdir(parents=True)
    (repo / "hopper" / "setup.py").write_text("# stand-in\n")
    (repo / ".git").mkdir()
    with pytest.raises(UsageError, match="git submodule update --init csrc/cutlass"):
        prepare(fa3, str(repo), tmp_path / "work", sys.executable)
    marker = repo / fa3.submodule_marker
    marker.parent.mkdir(parents=True)
    marker.write_text("// cutlass\n")
    got = prepare(fa3, str(repo), tmp_path / "work", sys.executable)
    assert (got / "hopper" / "setup.py").is_file() and not (got / ".git").exists()
    with pytest.raises(SubsetError, match=r"flash_attn_interface\.py not found"):
        apply_subset(got, fa3.subsets["olmo"], split=False)  # the subset guards FA3's Python entry point
    (got / "hopper" / "flash_attn_interface.py").write_text(
        "    flash_attn_3_gpu = torch.ops.flash_attn_3\n"
        "    q, k, k_new, v_new = [maybe_contiguous(x) for x in (q, k, k_new, v_new)]\n"
        "    dout, q, k, v, out = [maybe_contiguous(x) for x in (dout, q, k, v, out)]\n")
    launch = "BOOL_SWITCH(params.deterministic, Deterministic_, [&] {"
    (got / "hopper" / "flash_bwd_launch_template.h").write_text(launch)
    (got / "hopper" / "static_switch.h").write_text("#pragma once\n")
    assert apply_subset(got, fa3.subsets["olmo"], split=False)
    assert (got / "hopper" / "setup.py").read_text() == "# stand-in\n"  # unsplit, the kernels are chosen by env alone
    before = fingerprint(repo)
    assert fingerprint(repo) == before
    (repo / "hopper" / "setup.py").write_text("# edited checkout\n")
    assert fingerprint(repo) != before  # the wheel cache must not reuse a build of the old tree
