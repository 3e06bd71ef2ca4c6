"""Branch split for flash-attn 2 subset builds: each kept kernel file compiles as a small router plus one file
per runtime branch, so a parallel build waits for one kernel instantiation instead of three.

A kernel file's launch code (run_flash_fwd, run_flash_splitkv_fwd, run_flash_bwd_seqk_parallel) picks a kernel
with runtime switches, and every reachable combination is a kernel the file instantiates; the file's compile time
is their sum (measured with nvcc 13.0, sm_90: a non-causal backward file 91 s, a file of headers alone 15 s).
The recipe names the files to split (`split_directions`): only those whose compile time sets the build's.
Two switches carry the weight:

- is_even_MN (sequence lengths are multiples of the tiles): `BOOL_SWITCH(is_even_MN, ...)` in the launch
  templates becomes `EVENMN_SWITCH`, fixed per branch file (`OLMO_PART_EVEN_MN`);
- sliding-window (local) attention, reachable only in non-causal files: `LOCAL_SWITCH`, fixed per branch file
  (`OLMO_PART_LOCAL`).

Branch files (`<unit>_olmo_even.cu`, `_uneven`, `_local`) compile the upstream launch code in a namespace of their
own (FLASH_NAMESPACE=flash_olmo_<branch>), so templates instantiated with a switch fixed differently never share
a symbol, and each exports one plain entry function. The kept file becomes the router: it defines the
specialisation flash_api.cpp calls and sends each call to the branch its parameters select:

    local   window_size_left >= 0 or window_size_right >= 0, and not causal (the launch code's own test)
    even    no varlen (cu_seqlens null), seqlen_q and seqlen_k multiples of 256 (every flash-attn 2 tile divides 256)
    uneven  everything else: the kernels that handle any length, so correct for every input

Each branch re-checks at run time that its fixed switch agrees with what the launch code computes (TORCH_CHECK),
so a routing mistake is a clear error, never a wrong kernel. No upstream text is copied: the files below are
generated from the names and signatures the kept files declare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from olmo_common.bounded.files import read_text
from olmo_doctor.errors import UsageError

EVEN_MULTIPLE = 256  # the largest tile (split-KV kBlockN for head dim <= 64) in flash-attn 2.8
_UNIT = re.compile(r"flash_(?P<dir>fwd_split|fwd|bwd)_hdim\d+_(?:fp16|bf16)(?P<causal>_causal)?_sm80\.cu$")
_SPECIALISED = re.compile(
    r"template<>\nvoid (?P<entry>run_mha_(?:fwd|bwd)_<[^>]+>)\((?P<params>Flash_(?:fwd|bwd)_params) &params, "
    r"cudaStream_t stream\) \{\n\s+(?P<call>run_mha_(?:fwd|bwd)_hdim\d+<[^>]+>)\(params, stream\);\n\}"
)
_INSTANTIATED = re.compile(
    r"template void (?P<entry>run_mha_fwd_splitkv_dispatch<[^>]+>)\((?P<params>Flash_fwd_params) &params, "
    r"cudaStream_t stream\);"
)
_LAUNCH = re.compile(r'#include "(flash_(?:fwd|bwd)_launch_template\.h)"')
_SWITCH_SITES = {"csrc/flash_attn/src/flash_fwd_launch_template.h": 2,
                 "csrc/flash_attn/src/flash_bwd_launch_template.h": 1}
_EVEN_SWITCH = "BOOL_SWITCH(is_even_MN, IsEvenMNConst, [&] {"


class BranchSplitError(UsageError):
    """The source does not have the shape the branch split was written for."""


@dataclass(frozen=True)
class Branch:
    name: str
    even_mn: int
    local: int


EVEN, UNEVEN, LOCAL = Branch("even", 1, 0), Branch("uneven", 0, 0), Branch("local", 0, 1)


def _parse(unit: str) -> re.Match[str]:
    m = _UNIT.search(unit)
    if not m:
        raise BranchSplitError(f"{unit}: not a flash-attn 2 kernel file name")
    return m


def direction_of(unit: str) -> str:
    """'fwd', 'fwd_split' or 'bwd' from a kernel file's name."""
    return _parse(unit)["dir"]


def branches_of(unit: str) -> list[Branch]:
    """The branches a kernel file can reach: causal files never take the sliding-window path."""
    return [EVEN, UNEVEN] if _parse(unit)["causal"] else [EVEN, UNEVEN, LOCAL]


def branch_file(unit: str, branch: Branch) -> str:
    return unit.removesuffix(".cu") + f"_olmo_{branch.name}.cu"


def _entry_name(unit: str, branch: Branch) -> str:
    return f"olmo_{Path(unit).stem}_{branch.name}"


def _switch_macros() -> str:
    check_even = "olmo-doctor subset build: routed to the even-length kernels with lengths that are not tile multiples"
    check_local = "olmo-doctor subset build: routed to the wrong sliding-window branch"
    return f"""
// olmo-doctor --subset (branch split): a branch file fixes these two switches; elsewhere they are BOOL_SWITCH.
#ifdef OLMO_PART_EVEN_MN
  #define EVENMN_SWITCH(COND, CONST_NAME, ...)                                    \\
  [&] {{                                                                         \\
    TORCH_CHECK(!OLMO_PART_EVEN_MN || (COND), "{check_even}");                   \\
    constexpr static bool CONST_NAME = OLMO_PART_EVEN_MN;                         \\
    return __VA_ARGS__();                                                         \\
  }}()
#else
  #define EVENMN_SWITCH BOOL_SWITCH
#endif
#ifdef OLMO_PART_LOCAL
  #undef LOCAL_SWITCH
  #define LOCAL_SWITCH(COND, CONST_NAME, ...)                                     \\
  [&] {{                                                                         \\
    TORCH_CHECK(bool(COND) == bool(OLMO_PART_LOCAL), "{check_local}");            \\
    constexpr static bool CONST_NAME = OLMO_PART_LOCAL;                           \\
    return __VA_ARGS__();                                                         \\
  }}()
#endif
"""


def _branch_source(unit: str, branch: Branch, launch: str, call: str, params: str) -> str:
    return f"""// olmo-doctor --subset: branch "{branch.name}" of {Path(unit).name}, which routes calls here.
#undef FLASH_NAMESPACE
#define FLASH_NAMESPACE flash_olmo_{branch.name}
#define OLMO_PART_EVEN_MN {branch.even_mn}
#define OLMO_PART_LOCAL {branch.local}
#include "namespace_config.h"
#include "{launch}"

void {_entry_name(unit, branch)}(void *params, cudaStream_t stream) {{
    FLASH_NAMESPACE::{call}(*static_cast<FLASH_NAMESPACE::{params} *>(params), stream);
}}
"""


def _router_source(unit: str, branches: list[Branch], entry: str, params: str) -> str:
    decls = "".join(f"void {_entry_name(unit, b)}(void *params, cudaStream_t stream);\n" for b in branches)
    local = ""
    if LOCAL in branches:
        local = (
            "    if ((params.window_size_left >= 0 || params.window_size_right >= 0) && !params.is_causal) {\n"
            f"        {_entry_name(unit, LOCAL)}(&params, stream);\n"
            "        return;\n"
            "    }\n"
        )
    return f"""// olmo-doctor --subset: {Path(unit).name} only routes; its kernels compile in its branch files.
#include "namespace_config.h"
#include "flash.h"
#include "cutlass/numeric_types.h"

{decls}
namespace FLASH_NAMESPACE {{

template<>
void {entry}({params} &params, cudaStream_t stream) {{
{local}    const bool even = params.cu_seqlens_q == nullptr && params.cu_seqlens_k == nullptr
                      && params.seqlen_q % {EVEN_MULTIPLE} == 0 && params.seqlen_k % {EVEN_MULTIPLE} == 0;
    if (even) {{
        {_entry_name(unit, EVEN)}(&params, stream);
    }} else {{
        {_entry_name(unit, UNEVEN)}(&params, stream);
    }}
}}

}}  // namespace FLASH_NAMESPACE
"""


def _count_replace(text: str, old: str, new: str, expected: int, where: str) -> str:
    found = text.count(old)
    if found != expected:
        raise BranchSplitError(f"{where}: expected {expected} '{old}', found {found}; not the version the recipe pins")
    return text.replace(old, new)


def _read(tree: Path, rel: str, edited: dict[str, str]) -> str:
    if rel in edited:
        return edited[rel]
    path = tree / rel
    if not path.is_file():
        raise BranchSplitError(f"{path} not found; is {tree} a flash-attn 2 source tree?")
    return read_text(path, "source file")


def split_branches(tree: Path, units: list[str], edited: dict[str, str]) -> dict[str, str]:
    """New and changed files (relative path -> text) that split every kernel file in `units` by branch; `edited`
    holds the subset's other edits (setup.py, static_switch.h), which this extends. Nothing is written here."""
    out: dict[str, str] = {}
    for rel, count in _SWITCH_SITES.items():
        fixed = _EVEN_SWITCH.replace("BOOL_SWITCH", "EVENMN_SWITCH")
        out[rel] = _count_replace(_read(tree, rel, edited), _EVEN_SWITCH, fixed, count, rel)
    switch = "csrc/flash_attn/src/static_switch.h"
    out[switch] = _read(tree, switch, edited) + _switch_macros()
    added: list[str] = []
    for unit in units:
        files = _split_unit(unit, _read(tree, unit, edited))
        out.update(files)
        added += [f for f in files if f != unit]
    out["setup.py"] = _listed_first(_read(tree, "setup.py", edited), added)
    return out


def _split_unit(unit: str, text: str) -> dict[str, str]:
    """One kernel file's branch files, then the file itself as their router."""
    launch = _LAUNCH.search(text)
    spec = _SPECIALISED.search(text) or _INSTANTIATED.search(text)
    if not launch or not spec:
        raise BranchSplitError(f"{unit}: no kernel entry point of the expected form; not the pinned version")
    call = spec.groupdict().get("call") or spec["entry"]
    branches = branches_of(unit)
    out = {branch_file(unit, b): _branch_source(unit, b, launch[1], call, spec["params"]) for b in branches}
    out[unit] = _router_source(unit, branches, spec["entry"], spec["params"])
    return out


def _listed_first(setup: str, added: list[str]) -> str:
    """setup.py with the branch files first in the source list (right after flash_api.cpp): they are the long
    jobs."""
    api = re.compile(r'(?m)^(?P<indent>\s*)"csrc/flash_attn/flash_api\.cpp",\n')
    m = api.search(setup)
    if not m or len(api.findall(setup)) != 1:
        raise BranchSplitError("setup.py: flash_api.cpp is not listed once in the sources")
    lines = "".join(f'{m["indent"]}"{f}",\n' for f in added)
    return setup[: m.end()] + lines + setup[m.end():]
