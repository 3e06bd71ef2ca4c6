"""FlashAttention-3 `--subset olmo`: upstream's DISABLE_* switches pick the kernels, the deterministic backward is
compiled out (olmo_doctor/build/trim_fa3.py), and the Python entry point (hopper/flash_attn_interface.py) gets a
guard so that a call outside the subset raises a clear error. Measured on an H200: without it, FA3's own C++
refusal of a head dim of 256 killed the process (SIGSEGV)."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import torch

from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.build.subset import MARKER, SubsetError, apply_subset

FA3 = find_recipe("flash-attn-3")
OLMO = FA3.subsets["olmo"]
ROOT = Path(__file__).resolve().parents[2]

# the two places the transformation anchors on, in a stand-in module written for this test
STAND_IN = '''import torch

if True:
    flash_attn_3_gpu = torch.ops.flash_attn_3


def maybe_contiguous(x):
    return x


def _flash_attn_forward(q, k, v, k_new=None, v_new=None):
    q, k, k_new, v_new = [maybe_contiguous(x) for x in (q, k, k_new, v_new)]
    return "kernel called"


def _flash_attn_backward(dout, q, k, v, out, deterministic=False):
    dout, q, k, v, out = [maybe_contiguous(x) for x in (dout, q, k, v, out)]
    return "backward called"
'''
# the backward launch template's deterministic switch and the switch header the trim appends to
LAUNCH = ("    BOOL_SWITCH(params.h != params.h_k, GQA, [&] {\n"
          "        BOOL_SWITCH(params.deterministic, Deterministic_, [&] {\n")
SWITCHES = "#pragma once\n#define BOOL_SWITCH(COND, CONST_NAME, ...)\n"


def _tree(tmp_path: Path, text: str = STAND_IN, launch: str = LAUNCH) -> Path:
    (tmp_path / "hopper").mkdir()
    (tmp_path / "hopper" / "flash_attn_interface.py").write_text(text)
    (tmp_path / "hopper" / "flash_bwd_launch_template.h").write_text(launch)
    (tmp_path / "hopper" / "static_switch.h").write_text(SWITCHES)
    return tmp_path


def _forward(tree: Path, name: str = "_flash_attn_forward") -> object:
    namespace: dict[str, object] = {}
    exec(compile((tree / "hopper" / "flash_attn_interface.py").read_text(), "fa3", "exec"), namespace)
    return namespace[name]


def test_the_deterministic_backward_is_compiled_out_and_refused_in_python(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    apply_subset(tree, OLMO, split=False)
    launch = (tree / "hopper" / "flash_bwd_launch_template.h").read_text()
    assert "OLMO_FALSE_SWITCH(params.deterministic, Deterministic_, [&] {" in launch
    assert "BOOL_SWITCH(params.h != params.h_k, GQA" in launch  # GQA stays: OLMo 3 32B uses it
    assert "#define OLMO_FALSE_SWITCH(COND, CONST_NAME, ...)" in (tree / "hopper" / "static_switch.h").read_text()
    backward = _forward(tree, "_flash_attn_backward")
    ok = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    assert backward(ok, ok, ok, ok, ok) == "backward called"  # type: ignore[operator]
    with pytest.raises(RuntimeError, match=r"--subset olmo\) has no deterministic=True backward"):
        backward(ok, ok, ok, ok, ok, deterministic=True)  # type: ignore[operator]


def test_a_launch_template_without_the_switch_is_refused_and_nothing_written(tmp_path: Path) -> None:
    tree = _tree(tmp_path, launch="    BOOL_SWITCH(params.h != params.h_k, GQA, [&] {\n")
    with pytest.raises(SubsetError, match="expected one"):
        apply_subset(tree, OLMO, split=False)
    assert (tree / "hopper" / "flash_attn_interface.py").read_text() == STAND_IN and not (tree / MARKER).exists()


def test_calls_outside_the_subset_raise_before_the_kernel(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    apply_subset(tree, OLMO, split=False)
    forward = _forward(tree)
    ok = torch.zeros(1, 8, 2, 128, dtype=torch.bfloat16)
    assert forward(ok, ok, ok) == "kernel called"  # type: ignore[operator]
    big = torch.zeros(1, 8, 2, 256, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"olmo-doctor --subset olmo\) has kernels for head dim 128 only.*Got 256"):
        forward(big, big, big)  # type: ignore[operator]
    small = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="head dim 128 only"):
        forward(small, small, small)  # type: ignore[operator]
    half = torch.zeros(1, 8, 2, 128, dtype=torch.float16)
    with pytest.raises(RuntimeError, match=r"has kernels for dtype bf16 only.*Got torch.float16"):
        forward(half, half, half)  # type: ignore[operator]


def test_an_other_upstream_version_fails_loudly_and_leaves_the_tree(tmp_path: Path) -> None:
    changed = STAND_IN.replace("maybe_contiguous(x) for x in (q, k, k_new, v_new)", "x for x in (q, k)")
    tree = _tree(tmp_path, changed)
    with pytest.raises(SubsetError, match="expected one match"):
        apply_subset(tree, OLMO, split=False)
    assert (tree / "hopper" / "flash_attn_interface.py").read_text() == changed
    assert not (tree / MARKER).exists()


def test_applied_once(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    apply_subset(tree, OLMO, split=False)
    once = (tree / "hopper" / "flash_attn_interface.py").read_text()
    apply_subset(tree, OLMO, split=False)  # the marker says it is done: no second guard
    assert (tree / "hopper" / "flash_attn_interface.py").read_text() == once
    assert once.count("    _olmo_doctor_subset_check(q, v)\n") == 1


@pytest.mark.slow
@pytest.mark.upstream  # .ci/run selects it where .bench/ holds the pinned sources (no registry serves them)
def test_the_pinned_source_takes_the_edit(tmp_path: Path) -> None:
    """On the carried source of bench/fetch_sources.sh (it is not committed)."""
    carried = sorted((ROOT / ".bench").glob("flash-attention-3-*.tar.gz"))
    if not carried:
        pytest.fail("no .bench/flash-attention-3-*.tar.gz (an `upstream` test; bash bench/fetch_sources.sh makes it)")
    with tarfile.open(carried[-1]) as tar:
        top = tar.getnames()[0].split("/")[0]
        wanted = ("flash_attn_interface.py", "flash_bwd_launch_template.h", "static_switch.h")
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if m.name.endswith(wanted) and "/hopper/" in
                                          m.name], filter="data")
    apply_subset(tmp_path / top, OLMO, split=False)
    text = (tmp_path / top / "hopper" / "flash_attn_interface.py").read_text()
    assert text.count("    _olmo_doctor_subset_check(q, v)\n") == 1 and "def _olmo_doctor_subset_check" in text
    assert text.count("    _olmo_doctor_subset_backward_check(deterministic=deterministic)\n") == 1
    compile(text, "flash_attn_interface.py", "exec")
    launch = (tmp_path / top / "hopper" / "flash_bwd_launch_template.h").read_text()
    assert launch.count("OLMO_FALSE_SWITCH(params.deterministic, Deterministic_") == 1
