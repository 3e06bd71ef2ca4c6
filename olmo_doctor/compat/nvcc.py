"""What a CUDA toolkit's compiler accepts: the newest host GCC, the sm targets it compiles, how a
TORCH_CUDA_ARCH_LIST splits against it, and which libstdc++ symbol versions a GCC's output may need. Where an
artefact on the machine can answer (crt/host_config.h, `nvcc --list-gpu-code`) the probes read it and these
tables are the fallback.

Standard library only.
"""

from __future__ import annotations

import re

from olmo_doctor.compat.release import at_or_below, major_minor

# Read from NVIDIA's nvidia-cuda-nvcc(-cu11/-cu12) and nvidia-cuda-crt PyPI wheels, 11.8.89 ... 13.5.37.
NVCC_WHEELS = "https://pypi.org/project/nvidia-cuda-nvcc/"

# nvcc -> highest GCC major its crt/host_config.h accepts (`#if __GNUC__ > N` errors). Source: NVCC_WHEELS.
NVCC_MAX_GCC: dict[str, int] = {
    "11.8": 11,
    "12.0": 12, "12.1": 12, "12.2": 12, "12.3": 12,
    "12.4": 13, "12.5": 13, "12.6": 13,
    "12.8": 14, "12.9": 14,
    "13.0": 15, "13.1": 15, "13.2": 15,
    "13.5": 16,
}

# nvcc -> real sm targets it can compile (`ptxas --help` / `nvcc --list-gpu-code` from NVCC_WHEELS).
# CUDA 13.0 removed sm_50..sm_72 (Maxwell, Pascal, Volta); sm_101 became sm_110.
_SM_11_8 = {35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90}
_SM_12_0 = (_SM_11_8 - {35, 37})
_SM_12_8 = _SM_12_0 | {100, 101, 120}
_SM_12_9 = _SM_12_8 | {103, 121}
_SM_13_0 = {75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121}
_SM_13_5 = _SM_13_0 | {107}
NVCC_SM_TARGETS: list[tuple[str, set[int]]] = [
    ("11.8", _SM_11_8),
    ("12.0", _SM_12_0),
    ("12.8", _SM_12_8),
    ("12.9", _SM_12_9),
    ("13.0", _SM_13_0),
    ("13.5", _SM_13_5),
]

# First GCC release whose libstdc++ exports each GLIBCXX symbol version (libstdc++ ABI manual,
# https://gcc.gnu.org/onlinedocs/libstdc++/manual/abi.html). Rows in ascending order.
GLIBCXX_FIRST_GCC: dict[str, str] = {
    "3.4.28": "9.3", "3.4.29": "11.1", "3.4.30": "12.1", "3.4.31": "13.1", "3.4.32": "13.2",
    "3.4.33": "14.1", "3.4.34": "15.1",
}

# Named entries torch.utils.cpp_extension._get_cuda_arch_flags expands (its `named_arches` table in pytorch's
# torch/utils/cpp_extension.py). Only the names whose expansion was read are listed.
_NAMED_ARCHS: dict[str, str] = {
    "ampere": "8.0;8.6+PTX", "ada": "8.9+PTX", "hopper": "9.0+PTX", "blackwell": "10.0;12.0+PTX",
    "ampere+tegra": "8.7",
}
_ARCH_ENTRY = re.compile(r"^(\d+)\.(\d)([af]?)(\+ptx)?$")


def nvcc_max_gcc(nvcc: object) -> int | None:
    return at_or_below(NVCC_MAX_GCC, nvcc)


def nvcc_sm_targets(nvcc: object) -> set[int] | None:
    mm = major_minor(nvcc)
    if mm is None or mm < (11, 8):
        return None
    return at_or_below(NVCC_SM_TARGETS, nvcc)


def cc_to_sm(cc: object) -> int | None:
    """'9.0' -> 90, '12.1' -> 121."""
    mm = major_minor(cc)
    return mm[0] * 10 + mm[1] if mm else None


def nvcc_supports_cc(nvcc: object, cc: object) -> bool | None:
    targets = nvcc_sm_targets(nvcc)
    sm = cc_to_sm(cc)
    if targets is None or sm is None:
        return None
    return sm in targets


def min_nvcc_for_cc(cc: object) -> str | None:
    """The first toolkit in the table that targets a compute capability ('12.0' -> '12.8')."""
    sm = cc_to_sm(cc)
    return next((key for key, targets in NVCC_SM_TARGETS if sm in targets), None) if sm else None


def last_nvcc_for_cc(cc: object) -> str | None:
    """The newest toolkit in the table that still targets a compute capability (e.g. '7.0' -> '12.9': CUDA 13.0
    removed sm_50-sm_72; '3.7' -> '11.8'); the newest listed toolkit when it was never removed."""
    sm = cc_to_sm(cc)
    return next((key for key, targets in reversed(NVCC_SM_TARGETS) if sm in targets), None) if sm else None


def glibcxx_for_gcc(gcc: object) -> str | None:
    """Highest GLIBCXX_ symbol version that a GCC release's libstdc++ exports ('13.3.0' -> '3.4.32'). Code
    compiled by that GCC may need it."""
    return at_or_below([(first, glibcxx) for glibcxx, first in GLIBCXX_FIRST_GCC.items()], gcc)


def cuda_arch_list(text: object) -> list[str] | None:
    """A TORCH_CUDA_ARCH_LIST value ('9.0a', '8.0;8.6+PTX', 'Hopper', '7.5 8.0') in torch.cuda.get_arch_list()
    form: ['sm_90a'], ['sm_80', 'sm_86', 'compute_86'], ... Entries torch would reject are skipped here (torch
    itself raises 'Unknown CUDA arch'); None when nothing parses."""
    if not isinstance(text, str):
        return None
    out: list[str] = []
    for raw in re.split(r"[;\s,]+", text.strip()):
        entry = _NAMED_ARCHS.get(raw.lower(), raw)
        for part in entry.split(";"):
            m = _ARCH_ENTRY.match(part.strip().lower())
            if not m:
                continue
            code = f"{m.group(1)}{m.group(2)}{m.group(3)}"
            out.append(f"sm_{code}")
            if m.group(4):
                out.append(f"compute_{code}")
    return out or None


def _nvcc_can_build(nvcc_mm: tuple[int, int], sm: int, suffix: str) -> bool:
    targets = nvcc_sm_targets(f"{nvcc_mm[0]}.{nvcc_mm[1]}") or set()
    if sm not in targets:
        return False
    # arch-specific 'a' targets: sm_90a from 12.0, the Blackwell ones arrive with their base sm (12.8/12.9);
    # family 'f' targets from 12.9 (the target lists `ptxas --help` prints in NVIDIA's nvcc wheels)
    if suffix == "a" and sm == 90:
        return nvcc_mm >= (12, 0)
    if suffix == "f":
        return nvcc_mm >= (12, 9)
    return True


def nvcc_arch_split(nvcc: object, arch_list: object) -> tuple[list[str], list[str]] | None:
    """Entries of an arch list (get_arch_list form) that this nvcc cannot build, split into (too new for it,
    dropped by it), as 'X.Y[a|f]' strings. Too new: introduced by a later toolkit. Dropped: older than every
    target it has, or listed by an earlier toolkit (e.g. sm_70 on CUDA 13, sm_35 on CUDA 12). For nvcc older
    than 11.8 (not in the table) only sm_89 and newer are known to be too new (first shipped in 11.8)."""
    mm = major_minor(nvcc)
    if mm is None or not isinstance(arch_list, list):
        return None
    targets = nvcc_sm_targets(nvcc)
    split: dict[str, list[str]] = {"too new": [], "dropped": []}
    for arch in arch_list:
        m = re.match(r"(?:sm|compute)_(\d+)([af]?)$", str(arch))
        if not m:
            continue
        sm, suffix = int(m.group(1)), m.group(2)
        label = f"{sm // 10}.{sm % 10}{suffix}"
        verdict = _unbuildable(mm, targets, sm, suffix)
        if verdict is not None and label not in split["too new"] + split["dropped"]:
            split[verdict].append(label)
    return split["too new"], split["dropped"]


def _unbuildable(mm: tuple[int, int], targets: set[int] | None, sm: int, suffix: str) -> str | None:
    """Why an nvcc of version mm cannot build sm (with its a/f suffix): "too new", "dropped", or None when it can."""
    if targets is None:  # older than the table: only sm_89 and newer are known to be too new
        return "too new" if sm >= 89 else None
    if _nvcc_can_build(mm, sm, suffix):
        return None
    earlier = any(sm in t for key, t in NVCC_SM_TARGETS if (major_minor(key) or (0, 0)) < mm)
    return "dropped" if sm < min(targets) or earlier else "too new"


def archs_too_new_for_nvcc(nvcc: object, arch_list: object) -> list[str] | None:
    split = nvcc_arch_split(nvcc, arch_list)
    return split[0] if split else None


def archs_dropped_by_nvcc(nvcc: object, arch_list: object) -> list[str] | None:
    split = nvcc_arch_split(nvcc, arch_list)
    return split[1] if split else None
