"""Conditions on the installed kernels whose extension does not load, classified by the loader's own error
(olmo_doctor/loader_errors.py), for every kernel and every scope.

A few (kernel, kind) pairs have a rule of their own with wording for that package (SPECIFIC); these generic
conditions cover every other pair, so each failed import gets exactly one finding that names its real reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue
from olmo_doctor.loader_errors import classify, library_named

# key -> (distribution, what it is called)
KERNELS = {"flash_attn": ("flash-attn", "flash-attn"), "flash_attn_3": ("flash_attn_3", "FlashAttention-3"),
           "xformers": ("xformers", "xformers"), "torchao": ("torchao", "torchao")}
# what the torch worker imports for each (probes/torch_worker.py): the extension itself where it has one
IMPORTS = {"flash_attn": "flash_attn_2_cuda", "flash_attn_3": "flash_attn_interface", "xformers": "xformers.ops",
           "torchao": "torchao.float8"}
# (kernel, kind) pairs another rule words for that package: OD160, OD112, OD167 (flash-attn), OD161 / OD240
# (xformers), OD244 (torchao built for another torch)
SPECIFIC = {("flash_attn", "abi"), ("flash_attn", "cuda_runtime"), ("flash_attn", "libc"), ("xformers", "abi"),
            ("torchao", "abi"), ("torchao", "crashed"), ("torchao", "other"), ("torchao", "python_dependency")}


def failures(facts: Mapping[str, FactValue], kinds: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(key, kind, error) of each installed kernel whose import failed with one of `kinds`, not worded by a
    rule of its own."""
    out = []
    for key in KERNELS:
        error = facts.get(f"{key}.import_error")
        if facts.get(f"{key}.import_ok") is not False or not facts.get(f"{key}.version"):
            continue
        kind = classify(error) or "other"
        if kind in kinds and (key, kind) not in SPECIFIC:
            out.append((key, kind, str(error or "no error text")))
    return out


def _libraries(found: list[tuple[str, str, str]]) -> str:
    """The shared libraries the import errors name, each once, or "unknown"."""
    return ", ".join(dict.fromkeys(lib for _, _, e in found if (lib := library_named(e)))) or "unknown"


def _context(facts: Mapping[str, FactValue], found: list[tuple[str, str, str]]) -> Context:
    if not found:
        return None
    named = [f"{KERNELS[k][1]} {facts.get(f'{k}.version')}" for k, _, _ in found]
    return {
        "kernels": ", ".join(named),
        "errors": "; ".join(f"{KERNELS[k][1]}: {e}" for k, _, e in found),
        "requirements": [f"{KERNELS[k][0]}=={facts.get(f'{k}.version')}" for k, _, _ in found],
        "libraries": _libraries(found),
        "import_code": "import torch; " + "; ".join(f"import {IMPORTS[k]}" for k, _, _ in found),
    }


@fact_check
def extension_corrupt(facts: Mapping[str, FactValue]) -> Context:
    """A kernel's compiled file is not a loadable library: truncated, empty, another file, another machine's."""
    return _context(facts, failures(facts, ("corrupt",)))


@fact_check
def library_missing(facts: Mapping[str, FactValue]) -> Context:
    """A library a kernel's extension links cannot be found by the loader."""
    return _context(facts, failures(facts, ("missing_library", "cuda_runtime")))


@fact_check
def built_against_other_libraries(facts: Mapping[str, FactValue]) -> Context:
    """A kernel's extension needs symbols or library versions this torch or system does not have."""
    return _context(facts, failures(facts, ("abi", "libc")))


@fact_check
def does_not_load(facts: Mapping[str, FactValue]) -> Context:
    """A kernel's import fails for any other reason (it kills Python, cannot be mapped, needs a Python package)."""
    return _context(facts, failures(facts, ("crashed", "cannot_map", "python_dependency", "other")))


@lru_cache(maxsize=256)
def about_installed_kernel(code: str) -> bool:
    """Whether the rule `code` judges a kernel that is already installed (its condition is first about a kernel's
    facts, or is one of the conditions above), rather than whether one can be built: such a finding never refuses
    a build, since building the kernel is its fix."""
    from olmo_doctor.rules.expr import fact_refs
    from olmo_doctor.rules.model import find_rule

    rule = find_rule(code)
    if rule is None:
        return False
    if rule.check is not None:
        return rule.check.startswith(f"{__name__.rsplit('.', 1)[-1]}.")
    refs = fact_refs(rule.when or "")
    return bool(refs) and refs[0].split(".", 1)[0] in KERNELS
