"""Branch split for FlashAttention-3 subset builds: each kept kernel file (forward, backward) compiles as a small
router plus one file per runtime branch, so the build waits for one branch's kernels instead of a whole file's.

FA3's launch code picks a kernel with runtime switches (static_switch.h), and every reachable combination is a
kernel the file instantiates: the hdim-128 bf16 backward file holds 24 (causal/local/neither x varlen x GQA x
deterministic) and set the whole FA3 build's time on a 16-core H200 (181 s of 187 s). The recipe names, per
direction, which switches to fix (`split_switches`); two are supported, both read off the launch template:

- CAUSAL_LOCAL_SWITCH(causal_cond, local_cond, ...): causal if causal_cond, else local if local_cond, else
  neither (three branches; `local` is dropped when the subset disables local attention);
- VARLEN_SWITCH(cond, ...): variable-length batches or dense ones (two branches).

A branch file (`<unit>_olmo_<branch>.cu`) redefines the fixed switches after static_switch.h and renames, with
the preprocessor, every launch function the template defines (their bodies hold the switches, so two branches
must not share their symbols); the kernels themselves are templates on the switch values and never collide. It
exports one plain entry function. The kept file becomes the router: it defines the specialisation flash_api
calls and evaluates upstream's own switch conditions (copied from the launch template at build time, not stored
here) to pick the branch. Each branch re-checks its fixed values against the same conditions and aborts with a
message on a mismatch, so a routing mistake is never a wrong kernel.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from olmo_common.bounded.files import read_text
from olmo_doctor.build.branches import BranchSplitError

HOPPER = "hopper"
_LAUNCH = {"fwd": "flash_fwd_launch_template.h", "bwd": "flash_bwd_launch_template.h"}
_PARAMS = {"fwd": "Flash_fwd_params", "bwd": "Flash_bwd_params"}
# what the kept kernel file declares: a specialisation forwarding to a launcher (bwd), or an explicit instantiation
_SPECIALISED = re.compile(
    r"template<>\nvoid (?P<entry>run_mha_bwd_<[^>]+>)\(Flash_bwd_params &params, cudaStream_t stream\) \{\n"
    r"\s+(?P<call>run_mha_bwd_hdim\d+<[^>]+>)\(params, stream\);\n\}"
)
_INSTANTIATED = re.compile(
    r"template void (?P<entry>run_mha_fwd_<[^>]+>)\(Flash_fwd_params &params, cudaStream_t stream\);")
_DEFINED = re.compile(r"(?m)^void (run_\w+)\(")  # launch functions the template defines (renamed per branch)
_CAUSAL_LOCAL = re.compile(r"CAUSAL_LOCAL_SWITCH\((?P<causal>[^,()]+), (?P<local>[^,()]+), Is_causal, Is_local,")
_VARLEN = re.compile(r"VARLEN_SWITCH\((?P<cond>[^,]+), Varlen,")
SWITCHES = ("causal_local", "varlen")


@dataclass(frozen=True)
class Value:
    """One fixed value of one switch: its name in file names and the C++ that fixes and checks it."""

    switch: str
    name: str
    consts: tuple[bool, ...]  # the constexpr values the switch's lambda sees


CAUSAL, LOCAL, FULL = (Value("causal_local", "causal", (True, False)), Value("causal_local", "local", (False, True)),
                       Value("causal_local", "full", (False, False)))
VARLEN, DENSE = Value("varlen", "varlen", (True,)), Value("varlen", "dense", (False,))
VALUES = {"causal_local": (CAUSAL, LOCAL, FULL), "varlen": (VARLEN, DENSE)}


def kernel_file(direction: str, head_dim: int, dtype: str) -> str:
    """The instantiation file hopper/setup.py compiles for one kept (direction, head dim, dtype) on sm90."""
    return f"instantiations/flash_{direction}_hdim{head_dim}_{dtype}_sm90.cu"


def branches(switches: tuple[str, ...], local: bool = True) -> list[tuple[Value, ...]]:
    """Every combination of the fixed switches' values (no `local` branch when local attention is disabled)."""
    unknown = set(switches) - set(SWITCHES)
    if unknown:
        raise BranchSplitError(f"cannot split FlashAttention-3 on {sorted(unknown)}; supported: {SWITCHES}")
    pools = [[v for v in VALUES[s] if local or v is not LOCAL] for s in switches]
    return list(itertools.product(*pools))


def branch_name(branch: tuple[Value, ...]) -> str:
    return "_".join(v.name for v in branch)


def branch_file(unit: str, branch: tuple[Value, ...]) -> str:
    return unit.removesuffix(".cu") + f"_olmo_{branch_name(branch)}.cu"


def _entry_name(unit: str, branch: tuple[Value, ...]) -> str:
    return f"olmo_{Path(unit).stem}_{branch_name(branch)}"


def _one(pattern: re.Pattern[str], text: str, where: str) -> dict[str, str]:
    """The switch's arguments: every call site in the launch template must use the same conditions."""
    found = {tuple(sorted(m.groupdict().items())) for m in pattern.finditer(text)}
    if len(found) != 1:
        raise BranchSplitError(f"{where}: expected one form of {pattern.pattern.split('(')[0]}, found {len(found)}; "
                               "not the version the recipe pins")
    return dict(next(iter(found)))


def conditions(launch_text: str, switches: tuple[str, ...], where: str) -> dict[str, str]:
    """C++ boolean expressions over `params` for each fixed switch, read from upstream's launch template."""
    out: dict[str, str] = {}
    if "causal_local" in switches:
        cl = _one(_CAUSAL_LOCAL, launch_text, where)
        out["causal"], out["local"] = f"bool({cl['causal']})", f"(!bool({cl['causal']}) && bool({cl['local']}))"
    if "varlen" in switches:
        out["varlen"] = f"bool({_one(_VARLEN, launch_text, where)['cond']})"
    return out


def _macros(branch: tuple[Value, ...], message: str) -> str:
    lines = ['#include "static_switch.h"']
    for value in branch:
        if value.switch == "causal_local":
            c, loc = ("true" if x else "false" for x in value.consts)
            lines += ["#undef CAUSAL_LOCAL_SWITCH",
                      "#define CAUSAL_LOCAL_SWITCH(CAUSAL_COND, LOCAL_COND, CAUSAL_CONST_NAME, LOCAL_CONST_NAME, ...) "
                      "\\\n  [&] { \\\n"
                      f"    olmo_branch_check(bool(CAUSAL_COND) == {c} && (!bool(CAUSAL_COND) && bool(LOCAL_COND)) == "
                      f"{loc}, \"{message}\"); \\\n"
                      f"    constexpr static bool CAUSAL_CONST_NAME = {c}; \\\n"
                      f"    constexpr static bool LOCAL_CONST_NAME = {loc}; \\\n"
                      "    return __VA_ARGS__(); \\\n  }()"]
        else:
            v = "true" if value.consts[0] else "false"
            lines += ["#undef VARLEN_SWITCH",
                      "#define VARLEN_SWITCH(COND, CONST_NAME, ...) \\\n  [&] { \\\n"
                      f"    olmo_branch_check(bool(COND) == {v}, \"{message}\"); \\\n"
                      f"    constexpr static bool CONST_NAME = {v}; \\\n"
                      "    return __VA_ARGS__(); \\\n  }()"]
    return "\n".join(lines) + "\n"


def _branch_source(unit: str, branch: tuple[Value, ...], direction: str, call: str, renamed: list[str]) -> str:
    name = branch_name(branch)
    message = f"olmo-doctor subset build: {Path(unit).name} routed a call to branch {name} that does not match it"
    renames = "".join(f"#define {fn} olmo_{name}_{fn}\n" for fn in renamed)
    return f"""// olmo-doctor --subset: branch "{name}" of {Path(unit).name}, which routes calls here.
#include <cstdio>
#include <cstdlib>
static inline void olmo_branch_check(bool ok, const char *message) {{
    if (!ok) {{ std::fprintf(stderr, "%s\\n", message); std::abort(); }}
}}
{_macros(branch, message)}// the launch functions hold the switches fixed above: this branch's copies get own names
{renames}#include "{_LAUNCH[direction]}"

void {_entry_name(unit, branch)}(void *params, cudaStream_t stream) {{
    {call}(*static_cast<{_PARAMS[direction]} *>(params), stream);
}}
"""


def _test(value: Value, conds: dict[str, str]) -> str:
    if value.switch == "varlen":
        return conds["varlen"] if value.consts[0] else f"!{conds['varlen']}"
    return {"causal": conds["causal"], "local": conds["local"],
            "full": f"!{conds['causal']} && !{conds['local']}"}[value.name]


def _router_source(unit: str, all_branches: list[tuple[Value, ...]], direction: str, entry: str,
                   conds: dict[str, str]) -> str:
    decls = "".join(f"void {_entry_name(unit, b)}(void *params, cudaStream_t stream);\n" for b in all_branches)
    routes = "".join(
        f"    if ({' && '.join(f'({_test(v, conds)})' for v in b)}) {{ {_entry_name(unit, b)}(&params, stream); "
        "return; }\n" for b in all_branches)
    return f"""// olmo-doctor --subset: {Path(unit).name} only routes; its kernels compile in its branch files.
#include <cstdio>
#include <cstdlib>
#include "flash.h"
#include "cutlass/numeric_types.h"

{decls}
template<>
void {entry}({_PARAMS[direction]} &params, cudaStream_t stream) {{
{routes}    std::fprintf(stderr, "olmo-doctor subset build: no branch of {Path(unit).name} takes this call\\n");
    std::abort();
}}
"""


def _read(tree: Path, rel: str) -> str:
    path = tree / HOPPER / rel
    if not path.is_file():
        raise BranchSplitError(f"{path} not found; is {tree} a FlashAttention-3 (Dao-AILab/flash-attention) tree?")
    return read_text(path, "source file")


def split_unit(tree: Path, unit: str, direction: str, switches: tuple[str, ...], local: bool) -> dict[str, str]:
    """Router + branch files (paths relative to hopper/ -> text) for one kernel file; nothing is written."""
    text, launch = _read(tree, unit), _read(tree, _LAUNCH[direction])
    spec = (_SPECIALISED if direction == "bwd" else _INSTANTIATED).search(text)
    if not spec:
        raise BranchSplitError(f"{unit}: no kernel entry point of the expected form; not the pinned version")
    call = spec.groupdict().get("call") or spec["entry"]
    renamed = sorted(set(_DEFINED.findall(launch)))
    if call.split("<")[0] not in renamed:
        raise BranchSplitError(f"{_LAUNCH[direction]}: {call.split('<')[0]} is not defined there; "
                               "not the pinned version")
    conds = conditions(launch, switches, _LAUNCH[direction])
    all_branches = branches(switches, local)
    out = {branch_file(unit, b): _branch_source(unit, b, direction, call, renamed) for b in all_branches}
    out[unit] = _router_source(unit, all_branches, direction, spec["entry"], conds)
    return out


_SOURCES = re.compile(r"(?m)^(?P<indent>\s*)\[flash_api_source\]\n")


def split_fa3(tree: Path, units: dict[str, tuple[str, tuple[str, ...]]], local: bool = True) -> dict[str, str]:
    """Every edit (paths relative to hopper/ -> text) for `units` (kernel file -> (direction, switches)):
    routers, branch files, and setup.py compiling the branch files first (they are the long jobs)."""
    out: dict[str, str] = {}
    added: list[str] = []
    for unit, (direction, switches) in units.items():
        files = split_unit(tree, unit, direction, switches, local)
        out.update(files)
        added += [f for f in files if f != unit]
    setup = _read(tree, "setup.py")
    m = _SOURCES.search(setup)
    if not m or len(_SOURCES.findall(setup)) != 1:
        raise BranchSplitError("hopper/setup.py: the source list does not start with [flash_api_source] once")
    listed = ", ".join(f'"{f}"' for f in added)
    out["setup.py"] = setup[: m.start()] + f"{m['indent']}[{listed}] + [flash_api_source]\n" + setup[m.end():]
    return out
