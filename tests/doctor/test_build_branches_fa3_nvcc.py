"""FlashAttention-3's branch split compiles with the real nvcc for sm_90a (no GPU needed) on the pinned source
(Dao-AILab/flash-attention 0251105a + its CUTLASS submodule), and the router sends each call to the right branch:

- the router compiled into a host program with stand-in branch entries, called with every causal/local/neither
  combination flash_api's set_params_fprop can produce, names the branch upstream's own switch would take;
- a branch's fixed switch aborts with a clear message when a call does not match it (a routing mistake is never a
  wrong kernel), and so does a switch the subset compiled out (the deterministic backward) if one ever got there;
- the router and one branch file compile as hopper/setup.py compiles them; nm shows the router defines what
  flash_api calls and only references the branch entries, and the branch defines its entry with its kernels.

Marked slow and upstream: the source comes from bench/fetch_sources.sh's carried tarball when present (which is
where .ci/run selects these), else from GitHub's archives of the two pinned commits (fails loudly when neither
is there: no package registry serves FA3's hopper/ sources); skipped only without a toolkit.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest
from helpers import cuda_toolkit, toolkit_marks

from olmo_doctor.build.branches_fa3 import CAUSAL, branch_file, branches
from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.build.subset import apply_subset

FA3 = find_recipe("flash-attn-3")
OLMO = FA3.subsets["olmo"]
FA_COMMIT, CUTLASS_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced", "7127592069c2fe01b041e174ba4345ef9b279671"
ROOT = Path(__file__).resolve().parents[2]
UNIT = "instantiations/flash_bwd_hdim128_bf16_sm90.cu"
# hopper/setup.py's nvcc flags at that commit (besides include dirs, --threads and -lineinfo/--resource-usage)
FLAGS = ["-O3", "-std=c++17", "--use_fast_math", "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
         "-DCUTLASS_ENABLE_GDC_FOR_SM90", "-DCUTLASS_DEBUG_TRACE_LEVEL=0", "-DNDEBUG", "--expt-relaxed-constexpr",
         "-gencode", "arch=compute_90a,code=sm_90a"]

pytestmark = [*toolkit_marks(), pytest.mark.slow, pytest.mark.upstream]
NVCC = (cuda_toolkit() or Path("/usr/local/cuda")) / "bin" / "nvcc"


def _features() -> list[str]:
    """The -D flags hopper/setup.py derives from the subset's FLASH_ATTENTION_DISABLE_* environment."""
    names = {"SM80": "SM8x"}
    return [f"-DFLASHATTENTION_DISABLE_{names.get(k.split('DISABLE_')[1], k.split('DISABLE_')[1])}"
            for k in OLMO.env if k.startswith("FLASH_ATTENTION_DISABLE_")]


def _download(url: str) -> tarfile.TarFile:
    try:
        with urllib.request.urlopen(url, timeout=300) as r:
            return tarfile.open(fileobj=io.BytesIO(r.read()), mode="r:gz")
    except OSError as e:  # a network test without the network: fail loudly, never skip
        pytest.fail(f"FlashAttention-3 source not available (an `upstream` test; bash bench/fetch_sources.sh "
                    f"carries it): {url}: {e}")


def _extract(tar: tarfile.TarFile, dest: Path, keep: str, strip_to: str) -> None:
    for m in tar.getmembers():
        parts = m.name.split("/", 1)
        if len(parts) == 2 and parts[1].startswith(keep):
            m.name = strip_to + parts[1]
            tar.extract(m, dest, filter="data")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("fa3")
    carried = sorted((ROOT / ".bench").glob("flash-attention-3-*.tar.gz"))
    if carried:
        with tarfile.open(carried[-1]) as tar:
            _extract(tar, dest, "", "")
    else:
        base = "https://codeload.github.com"
        _extract(_download(f"{base}/Dao-AILab/flash-attention/tar.gz/{FA_COMMIT}"), dest, "hopper/", "hopper/")
        _extract(_download(f"{base}/NVIDIA/cutlass/tar.gz/{CUTLASS_COMMIT}"), dest, "include/", "csrc/cutlass/include/")
    root = dest if (dest / "hopper").is_dir() else next(dest.iterdir())
    apply_subset(root, OLMO, split=True)
    return root


def _nvcc(tree: Path, args: list[str], out: Path) -> None:
    hopper = tree / "hopper"
    proc = subprocess.run([str(NVCC), *args, "-o", str(out), f"-I{hopper}", f"-I{tree}/csrc/cutlass/include",
                           *FLAGS, *_features()], capture_output=True, text=True, timeout=1800, cwd=hopper)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _symbols(obj: Path) -> str:
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to read the compiled symbols"
    return subprocess.run([nm, "-C", str(obj)], check=True, capture_output=True, text=True).stdout


def test_router_sends_each_call_to_the_branch_upstream_would_take(tree: Path, tmp_path: Path) -> None:
    entries = "".join(
        f'void olmo_flash_bwd_hdim128_bf16_sm90_{b[0].name}(void *, cudaStream_t) {{ std::puts("{b[0].name}"); }}\n'
        for b in branches(("causal_local",)))
    # set_params_fprop: is_causal = window_left < 0 && window_right == 0; is_local = a window && !is_causal
    main = tmp_path / "route.cu"
    main.write_text(f"""#include <cstdio>
#include "flash.h"
#include "cutlass/numeric_types.h"
{entries}
int main() {{
    const bool cases[4][2] = {{{{true, false}}, {{false, true}}, {{false, false}}, {{true, true}}}};
    for (auto &c : cases) {{
        Flash_bwd_params params{{}};
        params.is_causal = c[0];
        params.is_local = c[1];
        run_mha_bwd_<90, cutlass::bfloat16_t, 128, false>(params, nullptr);
    }}
}}
""")
    exe = tmp_path / "route"
    _nvcc(tree, [str(tree / "hopper" / UNIT), str(main)], exe)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # CAUSAL_LOCAL_SWITCH tests causal first: causal and local both set is causal
    assert out.stdout.split() == ["causal", "local", "full", "causal"]


def test_a_branch_refuses_a_call_that_is_not_its_own(tree: Path, tmp_path: Path) -> None:
    text = (tree / "hopper" / branch_file(UNIT, (CAUSAL,))).read_text()
    prelude = text.split("// the launch functions")[0]  # the check, static_switch.h and the fixed switch
    prog = tmp_path / "check.cu"
    prog.write_text(prelude + """
int main(int argc, char **) {
    bool causal = argc == 1, local = argc > 2;  // no arguments: a causal call; two: a local one
    return CAUSAL_LOCAL_SWITCH(causal, local, Is_causal, Is_local, [&] { return Is_causal && !Is_local ? 0 : 3; });
}
""")
    exe = tmp_path / "check"
    _nvcc(tree, [str(prog)], exe)
    assert subprocess.run([str(exe)], capture_output=True, timeout=60).returncode == 0
    bad = subprocess.run([str(exe), "x", "y"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "routed a call to branch causal that does not match it" in bad.stderr


def test_router_and_branch_compile_for_sm90a(tree: Path, tmp_path: Path) -> None:
    router = tmp_path / "router.o"
    _nvcc(tree, ["-c", str(tree / "hopper" / UNIT)], router)
    syms = _symbols(router)
    assert " T void run_mha_bwd_<90, cutlass::bfloat16_t, 128, false>(Flash_bwd_params&, CUstream_st*)" in syms
    for name in ("causal", "local", "full"):
        assert f" U olmo_flash_bwd_hdim128_bf16_sm90_{name}(void*, CUstream_st*)" in syms
    assert "device_kernel" not in syms  # no kernels in the router
    branch = tmp_path / "causal.o"
    _nvcc(tree, ["-c", str(tree / "hopper" / branch_file(UNIT, (CAUSAL,)))], branch)
    syms = _symbols(branch)
    assert " T olmo_flash_bwd_hdim128_bf16_sm90_causal(void*, CUstream_st*)" in syms
    assert "run_mha_bwd_<" not in syms  # the specialisation flash_api calls lives in the router only
    assert "device_kernel<flash::enable_sm90<flash::FlashAttnBwdSm90<" in syms  # the branch holds the kernels
    # its launcher, instantiated once per remaining switch (varlen x GQA: the deterministic backward is compiled
    # out), always causal, not local: run_flash_bwd<Arch, hdim, kBlockM, kBlockN, Element, Is_causal, Is_local,
    # Has_softcap, Varlen, Deterministic, GQA, ...>
    launches = [ln for ln in syms.splitlines() if " W void olmo_causal_run_flash_bwd<" in ln]
    assert len(launches) == 4, launches
    assert all("<90, 128, 64, 128, cutlass::bfloat16_t, true, false, false, " in ln for ln in launches), launches
    assert all(ln.split("cutlass::bfloat16_t, ")[1].split(", ")[4] == "false" for ln in launches), launches


def test_a_compiled_out_switch_refuses_its_true_side(tree: Path, tmp_path: Path) -> None:
    prog = tmp_path / "false_switch.cu"
    prog.write_text("""#include "static_switch.h"
int main(int argc, char **) {
    return OLMO_FALSE_SWITCH(argc > 1, Deterministic, [&] { return Deterministic ? 3 : 0; });
}
""")
    exe = tmp_path / "false_switch"
    _nvcc(tree, [str(prog)], exe)
    assert subprocess.run([str(exe)], capture_output=True, timeout=60).returncode == 0
    bad = subprocess.run([str(exe), "deterministic"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "this switch was compiled out of this build" in bad.stderr
