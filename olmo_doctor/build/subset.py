"""Subset builds: edit a COPY of an upstream source tree so it compiles only the kernels a model uses.

flash-attn 2 instantiates every (direction, head dim, dtype, causal) combination in its own .cu file (72
of them) and its dispatcher references all of them, so dropping files alone gives `undefined symbol:
run_mha_fwd_` at import (flash-attention#1165). The transformation therefore edits three places, each
located by an anchor that must match exactly once (another upstream version fails loudly instead of
building something wrong):

- setup.py: keep only the subset's .cu files; add the recipe's FLASHATTENTION_DISABLE_* defines for nvcc AND
  the host compiler (flash_api.cpp has the matching runtime checks);
- src/static_switch.h: the dtype and head-dim switches dispatch to the compiled kernels only;
- flash_api.cpp: set_params_fprop (every forward, varlen, kv-cache and backward entry calls it) rejects other
  dtypes and head dims with a clear TORCH_CHECK error before any kernel is launched.

A parallel build lasts as long as its slowest unit, and one kernel file still instantiates a kernel per branch
of its runtime switches (sequence lengths that are or are not multiples of the tile, sliding window or not).
When the plan splits branches, each kernel file of the recipe's `split_directions` becomes a small router and
every branch compiles in a file of its own (see branches.py): for `--subset olmo` the two backward files become
2 routers + 5 branch files (12 files in all), so the slowest job holds fewer kernels.

No upstream text is stored here: the code below writes its own replacements.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path

from olmo_common.bounded.data import load_json
from olmo_common.bounded.files import read_text
from olmo_doctor.build.recipes import Subset
from olmo_doctor.errors import UsageError

MARKER = "OLMO_DOCTOR_SUBSET.json"
_FA2_CU = re.compile(
    r'^\s*"csrc/flash_attn/src/flash_(?P<dir>fwd_split|fwd|bwd)_hdim(?P<hd>\d+)_(?P<dt>fp16|bf16)'
    r'(?P<causal>_causal)?_sm80\.cu",\s*$'
)
_DTYPES = {
    "bf16": ("cutlass::bfloat16_t", "torch::kBFloat16"),
    "fp16": ("cutlass::half_t", "torch::kFloat16"),
}


class SubsetError(UsageError):
    """The source tree does not look like the version the subset was written for."""


def _replace_once(
    text: str, pattern: str, repl: str | Callable[[re.Match[str]], str], where: str, flags: int = 0
) -> str:
    new, count = re.subn(pattern, repl, text, flags=flags)
    if count != 1:
        raise SubsetError(
            f"{where}: expected one match for the subset edit, found {count}; "
            "this source is not the version the recipe pins"
        )
    return new


def _macro(name: str, params: str, body_lines: list[str]) -> str:
    """A multi-line #define with aligned continuation backslashes."""
    lines = [f"#define {name}({params})", *body_lines]
    width = max(len(line) for line in lines) + 1
    return "\n".join(line.ljust(width) + "\\" for line in lines[:-1]) + "\n" + lines[-1] + "\n"


def _switch(name: str, params: str, cond: str, cases: list[tuple[str, str]]) -> str:
    """A dispatch lambda: `if (cond == case) {decl; run} else ...`, the last case unconditional."""
    body = ["  [&] {"]
    for i, (value, decl) in enumerate(cases):
        last = i == len(cases) - 1
        if last:
            opener = "    {" if i == 0 else "    } else {"
        else:
            opener = ("    if" if i == 0 else "    } else if") + f" ({cond.format(value)}) {{"
        body += [opener, f"      {decl};", "      return __VA_ARGS__();"]
    body += ["    }", "  }()"]
    return _macro(name, params, body)


def flash_attn_2_sources(setup_text: str) -> list[str]:
    """The CUDA extension's source list in a flash-attn setup.py (the first `sources=[...]` block)."""
    m = re.search(r"sources=\[(.*?)\]", setup_text, re.DOTALL)
    return re.findall(r'"(csrc/[^"]+\.(?:cu|cpp))"', m.group(1)) if m else []


def _fa2_wanted(m: re.Match[str], subset: Subset) -> bool:
    """Is the kernel file setup.py lists on this line (direction, head dim, dtype, causal) one the subset keeps?"""
    return (
        m["dir"] in subset.directions
        and int(m["hd"]) in subset.head_dims
        and m["dt"] in subset.dtypes
        and bool(m["causal"]) in subset.causal
    )


def _fa2_setup(text: str, subset: Subset) -> str:
    kept, dropped = [], 0
    out = []
    for line in text.splitlines(keepends=True):
        m = _FA2_CU.match(line)
        if m and not _fa2_wanted(m, subset):
            dropped += 1
            continue
        if m:
            kept.append(line)
        out.append(line)
    expected = len(subset.directions) * len(subset.head_dims) * len(subset.dtypes) * len(subset.causal)
    if len(kept) != expected or dropped == 0:
        raise SubsetError(
            f"setup.py: kept {len(kept)} kernel files (expected {expected}), dropped {dropped}; "
            "this source is not the version the recipe pins"
        )
    defines = ", ".join(f'"-D{d}"' for d in subset.defines)
    inject = (
        f"    # olmo-doctor --subset {subset.name}: trim kernel variants in every unit (.cu, flash_api.cpp)\n"
        f"    _subset_defines = [{defines}]\n"
        "    nvcc_flags = nvcc_flags + _subset_defines\n"
        "    compiler_c17_flag = compiler_c17_flag + _subset_defines\n"
    )
    return _replace_once(
        "".join(out),
        r"(?m)^(?=    ext_modules\.append\(\n        CUDAExtension\(\n"
        r'            name="flash_attn_2_cuda",\n            sources=\[)',
        inject,
        "setup.py",
    )


def _fa2_switches(text: str, subset: Subset) -> str:
    dtypes = [(_DTYPES[d][0], f"using elem_type = {_DTYPES[d][0]}") for d in subset.dtypes]
    # FP16_SWITCH(COND): COND means "is fp16"; with one dtype the switch ignores it (flash_api checks dtypes)
    fp16 = _switch("FP16_SWITCH", "COND, ...", "COND", sorted(dtypes, key=lambda d: "half" not in d[0]))
    dims = [(str(d), f"constexpr static int kHeadDim = {d}") for d in sorted(subset.head_dims)]
    hdim = _switch("HEADDIM_SWITCH", "HEADDIM, ...", "HEADDIM == {}", dims)
    macro = r"(?ms)^#define {}\(.*?[^\\]\n(?=\n|#|\Z)"
    text = _replace_once(text, macro.format("FP16_SWITCH"), lambda _: fp16, "src/static_switch.h")
    return _replace_once(text, macro.format("HEADDIM_SWITCH"), lambda _: hdim, "src/static_switch.h")


def subset_error_text(subset: Subset, what: str) -> str:
    """The message a call outside the subset raises (tests grep the compiled library for it)."""
    allowed = {"dtype": "/".join(subset.dtypes), "head dim": "/".join(map(str, subset.head_dims))}[what]
    return (
        f"This flash-attn build (olmo-doctor --subset {subset.name}) has kernels for {what} {allowed} only; "
        f"rebuild without --subset for other {what}s. Got "
    )


def _fa2_api(text: str, subset: Subset) -> str:
    dtype_ok = " || ".join(f"q.dtype() == {_DTYPES[d][1]}" for d in subset.dtypes)
    dim_ok = " || ".join(f"d == {d}" for d in subset.head_dims)
    # The messages are built with std::string, not TORCH_CHECK's `"text", value` form: that form formats the
    # value through std::ostream inside this library, and a toolchain that links libstdc++ statically into
    # the extension (the H200 image's /opt/gcc does) crashes there (SIGSEGV in num_put; measured on the H200).
    checks = (
        f"    // olmo-doctor --subset {subset.name}: only these kernels exist; fail here, not in a launch.\n"
        f'    TORCH_CHECK({dtype_ok}, std::string("{subset_error_text(subset, "dtype")}") + '
        "c10::toString(q.scalar_type()));\n"
        f'    TORCH_CHECK({dim_ok}, std::string("{subset_error_text(subset, "head dim")}") + std::to_string(d));\n'
    )
    return _replace_once(
        text,
        r"(?m)^(    params\.is_bf16 = q\.dtype\(\) == torch::kBFloat16;\n)",
        lambda m: m.group(1) + checks,
        "csrc/flash_attn/flash_api.cpp",
    )


def _flash_attn_2(tree: Path, subset: Subset, split: bool) -> list[str]:
    edits = {
        "setup.py": _fa2_setup,
        "csrc/flash_attn/src/static_switch.h": _fa2_switches,
        "csrc/flash_attn/flash_api.cpp": _fa2_api,
    }
    new: dict[str, str] = {}
    for rel, edit in edits.items():  # edit everything in memory first: a failed anchor leaves the tree as it was
        path = tree / rel
        if not path.is_file():
            raise SubsetError(f"{path} not found; is {tree} a flash-attn 2 source tree?")
        new[rel] = edit(read_text(path, "source file"), subset)
    if split:
        from olmo_doctor.build.branches import direction_of, split_branches

        kept = [u for u in flash_attn_2_sources(new["setup.py"]) if u.endswith(".cu")]
        new.update(split_branches(tree, [u for u in kept if direction_of(u) in subset.split_directions], new))
    for rel, text in new.items():
        (tree / rel).write_text(text)
    return flash_attn_2_sources(new["setup.py"])


def fa3_guard_source(subset: Subset) -> str:
    """The check the FlashAttention-3 subset adds to flash_attn_interface.py (tests exec it)."""
    dtypes = ", ".join(f"torch.{ {'bf16': 'bfloat16', 'fp16': 'float16'}[d]}" for d in subset.dtypes)
    dims = ", ".join(map(str, subset.head_dims))
    head = subset_error_text(subset, "head dim").replace("flash-attn build", "FlashAttention-3 build")
    dtype = subset_error_text(subset, "dtype").replace("flash-attn build", "FlashAttention-3 build")
    return (
        "\n\ndef _olmo_doctor_subset_check(q, v):\n"
        f"    # olmo-doctor --subset {subset.name}: only these kernels exist. The extension's own refusal is a C++\n"
        "    # exception thrown through torch's stable-ABI dispatcher, which kills the process when the extension\n"
        "    # carries its own copy of libstdc++; refuse here, in Python, before the op is called.\n"
        f"    if q.dtype not in ({dtypes},):\n"
        f"        raise RuntimeError({dtype!r} + str(q.dtype))\n"
        f"    if q.shape[-1] not in ({dims},) or v.shape[-1] not in ({dims},):\n"
        f"        raise RuntimeError({head!r} + str(q.shape[-1]) + '/' + str(v.shape[-1]))\n"
    )


def _fa3_current(tree: Path, edits: dict[str, str], name: str) -> str:
    """A file of the FA3 tree as edited so far."""
    if name in edits:
        return edits[name]
    if not (tree / name).is_file():
        raise SubsetError(f"{tree / name} not found; is {tree} a FlashAttention-3 tree?")
    return read_text(tree / name, "source file")


def _fa3_split(tree: Path, subset: Subset) -> dict[str, str]:
    """The subset's kernel files as routers + branch files (branches_fa3.py), by path in the tree."""
    from olmo_doctor.build.branches_fa3 import kernel_file, split_fa3

    local = subset.env.get("FLASH_ATTENTION_DISABLE_LOCAL", "FALSE") != "TRUE"
    units = {kernel_file(d, hd, dt): (d, subset.split_switches.get(d, ()))
             for d in subset.split_directions for hd in subset.head_dims for dt in subset.dtypes}
    return {f"hopper/{k}": v for k, v in split_fa3(tree, units, local).items()}


def _flash_attn_3(tree: Path, subset: Subset, split: bool) -> list[str]:
    """FA3's DISABLE_* switches (the plan's env) pick the kernels; the Python entry point gets a guard so that a
    call outside them raises a clear error instead of reaching the extension's crashing refusal. When the plan
    splits branches, the recipe's kernel files become routers + branch files (branches_fa3.py)."""
    rel = "hopper/flash_attn_interface.py"
    path = tree / rel
    if not path.is_file():
        raise SubsetError(f"{path} not found; is {tree} a FlashAttention-3 (Dao-AILab/flash-attention) tree?")
    text = _replace_once(read_text(path, "source file"), r"(?m)^(    flash_attn_3_gpu = torch\.ops\.flash_attn_3\n)",
                         lambda m: m.group(1) + fa3_guard_source(subset), rel)
    first_line = r"(?m)^(    q, k, k_new, v_new = \[maybe_contiguous\(x\) for x in \(q, k, k_new, v_new\)\]\n)"
    text = _replace_once(text, first_line, lambda m: "    _olmo_doctor_subset_check(q, v)\n" + m.group(1), rel)
    edits = {rel: text}
    from olmo_doctor.build.trim_fa3 import trim

    edits.update(trim(functools.partial(_fa3_current, tree, edits), subset.name, subset.drop_switches))
    if split:
        edits.update(_fa3_split(tree, subset))
    for rel_path, new_text in edits.items():  # all computed first: a failed anchor leaves the tree as it was
        (tree / rel_path).write_text(new_text)
    if split:
        return sorted(k.removeprefix("hopper/") for k in edits if k.endswith(".cu"))
    return _env_only(tree, subset, split)


def _env_only(tree: Path, subset: Subset, split: bool) -> list[str]:
    """Packages with their own switches (FlashAttention-3's FLASH_ATTENTION_DISABLE_*): the plan's env does
    the work; nothing in the tree changes."""
    return [f"({subset.translation_units} units chosen by hopper/setup.py from the plan's environment)"]


TRANSFORMS: dict[str, Callable[[Path, Subset, bool], list[str]]] = {
    "flash_attn_2": _flash_attn_2, "flash_attn_3": _flash_attn_3, "env": _env_only}
ENV_DRIVEN = ("env", "flash_attn_3")  # upstream's build picks the units: the count is not ours to check


def apply_subset(tree: Path, subset: Subset, split: bool | None = None) -> list[str]:
    """Transform `tree` (a private copy) in place; returns the files left to compile (the kept translation
    units, plus their branch files when `split`: the plan's choice, by default the recipe's)."""
    split = subset.split_branches if split is None else split
    marker = tree / MARKER
    if marker.exists():
        done = load_json(marker, "build state")
        if done.get("subset") != subset.name or done.get("split_branches", False) != split:
            raise SubsetError(f"{tree} already carries subset '{done.get('subset')}' (split_branches "
                              f"{done.get('split_branches', False)}); use a fresh copy")
        return list(done["translation_units"])
    units = TRANSFORMS[subset.transform](tree, subset, split)
    expected = subset.compile_units if split else subset.translation_units
    if subset.transform not in ENV_DRIVEN and len(units) != expected:
        raise SubsetError(f"subset '{subset.name}' left {len(units)} files to compile, the recipe expects {expected}")
    marker.write_text(json.dumps({"subset": subset.name, "split_branches": split, "translation_units": units},
                                 indent=1))
    return units
