"""Compatibility tables, one source per row set. Rules and plans look facts up here instead of remembering.

Every table cites where it was read (NVIDIA's release notes and nvcc documentation, PyTorch's and the kernel
packages' sources, as each comment says); where an artefact on the machine can answer (crt/host_config.h,
torch.cuda.get_arch_list()) the probe reads it and these tables are the fallback.
"""

from __future__ import annotations

import re

# Version semantics live in versions.py; re-exported here because every table lookup speaks them.
from olmo_doctor.versions import major_minor as major_minor
from olmo_doctor.versions import parse_version as parse_version
from olmo_doctor.versions import version_satisfies as version_satisfies

# CUDA toolkit -> minimum Linux driver (GA releases). Source: CUDA 13.2 U2 release notes, Table 3
# https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html
DRIVER_FLOOR_LINUX: dict[str, str] = {
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
    "13.2": "595.45.04",
}
# Minor-version compatibility floor per CUDA major: "applications ... can run, with limited feature-set, on
# systems having at least the minimum required driver". Source:
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html
DRIVER_FLOOR_MAJOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def driver_floor(cuda: object) -> str | None:
    """GA driver floor for a CUDA 'major.minor' (the nearest listed release at or below it)."""
    mm = major_minor(cuda)
    if mm is None:
        return None
    best: str | None = None
    for key, floor in DRIVER_FLOOR_LINUX.items():
        kmm = major_minor(key)
        if kmm is not None and kmm <= mm and kmm[0] == mm[0]:
            best = floor
    return best


def driver_floor_major(cuda: object) -> str | None:
    mm = major_minor(cuda)
    return DRIVER_FLOOR_MAJOR.get(mm[0]) if mm else None


# nvcc -> highest GCC major its crt/host_config.h accepts (`#if __GNUC__ > N` errors). Source: host_config.h
# read from NVIDIA's nvidia-cuda-nvcc(-cu11/-cu12) and nvidia-cuda-crt PyPI wheels, 11.8.89 ... 13.5.37.
NVCC_MAX_GCC: dict[str, int] = {
    "11.8": 11,
    "12.0": 12, "12.1": 12, "12.2": 12, "12.3": 12,
    "12.4": 13, "12.5": 13, "12.6": 13,
    "12.8": 14, "12.9": 14,
    "13.0": 15, "13.1": 15, "13.2": 15,
    "13.5": 16,
}


def nvcc_max_gcc(nvcc: object) -> int | None:
    mm = major_minor(nvcc)
    if mm is None:
        return None
    best: int | None = None
    for key, gcc in NVCC_MAX_GCC.items():
        kmm = major_minor(key)
        if kmm is not None and kmm <= mm:
            best = gcc
    return best


# nvcc -> real sm targets it can compile (ptxas --help / nvcc --list-gpu-code from NVIDIA's wheels).
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


def nvcc_sm_targets(nvcc: object) -> set[int] | None:
    mm = major_minor(nvcc)
    if mm is None or mm < (11, 8):
        return None
    best: set[int] | None = None
    for key, targets in NVCC_SM_TARGETS:
        kmm = major_minor(key)
        if kmm is not None and kmm <= mm:
            best = targets
    return best


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


# Minimum nvcc to target a compute capability (first toolkit listing the sm). Same source as above.
def min_nvcc_for_cc(cc: object) -> str | None:
    sm = cc_to_sm(cc)
    if sm is None:
        return None
    for key, targets in NVCC_SM_TARGETS:
        if sm in targets:
            return key
    return None


def last_nvcc_for_cc(cc: object) -> str | None:
    """The newest toolkit in the table that still targets a compute capability (e.g. '7.0' -> '12.9': CUDA 13.0
    removed sm_50-sm_72; '3.7' -> '11.8'); the newest listed toolkit when it was never removed."""
    sm = cc_to_sm(cc)
    if sm is None:
        return None
    last = None
    for key, targets in NVCC_SM_TARGETS:
        if sm in targets:
            last = key
    return last


def gpu_name_to_cc(name: object) -> str | None:
    """Compute capability for a GPU marketing name; the sourced table lives in olmo_doctor/gpus.py."""
    from olmo_doctor.gpus import name_to_cc

    return name_to_cc(name)


# flash-attn 2 arch tokens: only 80, 90, 100, 120 emit gencodes (flash_attn 2.8.3.post2 setup.py L179-191);
# desktop 8.x runs sm_80 SASS; 10.3 runs 10.0; 12.1 runs 12.0 (same-major binary compatibility).
def flash_attn_arch(cc: object) -> str | None:
    mm = major_minor(cc)
    if mm is None or mm[0] < 8:
        return None
    return {8: "80", 9: "90", 10: "100", 12: "120"}.get(mm[0])


# First GCC release whose libstdc++ exports each GLIBCXX symbol version (libstdc++ ABI manual).
GLIBCXX_FIRST_GCC: dict[str, str] = {
    "3.4.28": "9.3", "3.4.29": "11.1", "3.4.30": "12.1", "3.4.31": "13.1", "3.4.32": "13.2",
    "3.4.33": "14.1", "3.4.34": "15.1",
}

# PyPI torch default CUDA per release (metadata pins read with pip --dry-run --report) and wheel arch lists
# (pytorch RELEASE.md support matrix, .ci/manywheel/build_cuda.sh). Used when torch cannot be imported.
TORCH_PYPI_DEFAULT_CUDA: dict[str, str] = {
    "2.1": "12.1", "2.2": "12.1", "2.3": "12.1", "2.4": "12.1", "2.5": "12.4", "2.6": "12.4", "2.7": "12.6",
    "2.8": "12.8", "2.9": "12.8", "2.10": "12.8", "2.11": "13.0", "2.12": "13.0", "2.13": "13.0", "2.14": "13.0",
}
TORCH_WHEEL_ARCHS: dict[str, list[str]] = {
    "11.8": ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.1": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.4": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.6": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "12.8": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "12.9": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
    "13.0": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"],
}


def arch_list_covers(arch_list: object, cc: object) -> bool | None:
    """Does a torch arch list (['sm_80', 'compute_90', ...]) run on this compute capability?

    A cubin sm_XY runs on the same major with minor >= Y; PTX compute_XY JIT-compiles for any CC >= XY.
    """
    if not isinstance(arch_list, list) or not arch_list:
        return None
    mm = major_minor(cc)
    if mm is None:
        return None
    for arch in arch_list:
        m = re.match(r"(sm|compute)_(\d+)(\d)[af]?$", str(arch))
        if not m:
            continue
        a_major, a_minor = int(m.group(2)), int(m.group(3))
        if m.group(1) == "sm" and a_major == mm[0] and a_minor <= mm[1]:
            return True
        if m.group(1) == "compute" and (a_major, a_minor) <= mm:
            return True
    return False


# --- Rule helpers: TORCH_CUDA_ARCH_LIST, nvcc targets, libstdc++ and torch wheel indexes ---

# Named entries torch.utils.cpp_extension._get_cuda_arch_flags expands (its `named_arches` table in pytorch's
# torch/utils/cpp_extension.py). Only the names whose expansion was read are listed.
_NAMED_ARCHS: dict[str, str] = {
    "ampere": "8.0;8.6+PTX", "ada": "8.9+PTX", "hopper": "9.0+PTX", "blackwell": "10.0;12.0+PTX",
    "ampere+tegra": "8.7",
}
_ARCH_ENTRY = re.compile(r"^(\d+)\.(\d)([af]?)(\+ptx)?$")


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
    too_new: list[str] = []
    dropped: list[str] = []
    for arch in arch_list:
        m = re.match(r"(?:sm|compute)_(\d+)([af]?)$", str(arch))
        if not m:
            continue
        sm, suffix = int(m.group(1)), m.group(2)
        label = f"{sm // 10}.{sm % 10}{suffix}"
        if label in too_new or label in dropped:
            continue
        if targets is None:
            if sm >= 89:
                too_new.append(label)
            continue
        if _nvcc_can_build(mm, sm, suffix):
            continue
        earlier = any(sm in t for key, t in NVCC_SM_TARGETS if (major_minor(key) or (0, 0)) < mm)
        (dropped if sm < min(targets) or earlier else too_new).append(label)
    return too_new, dropped


def archs_too_new_for_nvcc(nvcc: object, arch_list: object) -> list[str] | None:
    split = nvcc_arch_split(nvcc, arch_list)
    return split[0] if split else None


def archs_dropped_by_nvcc(nvcc: object, arch_list: object) -> list[str] | None:
    split = nvcc_arch_split(nvcc, arch_list)
    return split[1] if split else None


def glibcxx_for_gcc(gcc: object) -> str | None:
    """Highest GLIBCXX_ symbol version that a GCC release's libstdc++ exports (GLIBCXX_FIRST_GCC above;
    libstdc++ ABI manual https://gcc.gnu.org/onlinedocs/libstdc++/manual/abi.html). Code compiled by that GCC
    may need it."""
    mm = major_minor(gcc)
    if mm is None:
        return None
    best: str | None = None
    for glibcxx, first in GLIBCXX_FIRST_GCC.items():
        fmm = major_minor(first)
        if fmm is not None and fmm <= mm:
            best = glibcxx
    return best


# Wheel indexes of current torch releases (pytorch RELEASE.md support matrix: 2.11 ships cu126, cu128, cu130;
# cu118 last in 2.7). A CUDA 12.x toolkit builds against any cu12x torch (only the major must match).
def torch_index_for_cuda(cuda: object) -> str | None:
    """The download.pytorch.org index ('cu130', 'cu128', 'cu126', 'cu118') whose torch matches a CUDA
    version's major without exceeding it where possible; None for CUDA < 11."""
    mm = major_minor(cuda)
    if mm is None:
        return None
    if mm[0] >= 13:
        return "cu130"
    if mm[0] == 12:
        return "cu128" if mm >= (12, 8) else "cu126"
    if mm[0] == 11:
        return "cu118"
    return None


def torch_index_for_driver(driver: object) -> str | None:
    """The newest torch wheel index this Linux driver runs: the CUDA of the highest GA floor it meets
    (DRIVER_FLOOR_LINUX), any cu12x from 525.60.13 and cu118 from 450.80.02 through minor-version
    compatibility (DRIVER_FLOOR_MAJOR); None when it is older than that."""
    v = parse_version(driver)
    if v is None:
        return None
    best: str | None = None
    for cuda, floor in DRIVER_FLOOR_LINUX.items():
        fv = parse_version(floor)
        if fv is not None and fv <= v:
            best = cuda
    if best is not None:
        return torch_index_for_cuda(best)
    return "cu118" if v >= (parse_version(DRIVER_FLOOR_MAJOR[11]) or v) else None


# Float8 tensor cores (the e4m3/e5m2 GEMMs torch._scaled_mm runs) exist from compute capability 8.9: Ada (8.9),
# Hopper (9.0), Blackwell (10.x, 12.x); Ampere (8.0, 8.6, 8.7) has none. Source: torch._scaled_mm's own check
# ("only supported on CUDA devices with compute capability >= 9.0 or 8.9"), and torchtitan's float8 converter,
# which swaps in torchao's Float8Linear only on SM89 or later (pytorch/torchtitan PR 1096).
# olmo/nn/float8.py refuses `precision: fp8` below it.
FLOAT8_MIN_CC = (8, 9)


# torch -> the torchao release made for it (what to reinstall when torchao fails to import against this torch).
# Up to 0.16.0 each torchao wheel is built against one torch and checks it by exact version: torchao's release
# compatibility table (https://github.com/pytorch/ao/issues/2919) and the `torchao_pytorch_compatible_versions`
# pairs in its torchao/__init__.py (0.15.0 with 2.9.1 and 2.10.0.dev, 0.16.0 with 2.10.0). 0.17.0 is ABI stable
# against torch 2.11 and later (https://github.com/pytorch/ao/pull/4154) and 0.18.0 requires torch >= 2.11 (its
# release notes, https://github.com/pytorch/ao/releases/tag/v0.18.0). Rows: the lowest torch of the row, in PEP 440
# order (a nightly 2.10.0.dev sorts before 2.10.0, as torchao's own pairs do), and the requirement.
TORCHAO_FOR_TORCH: tuple[tuple[str, str], ...] = (
    ("2.11", "torchao>=0.17.0"),
    ("2.10", "torchao==0.16.0"),
    ("2.9.1", "torchao==0.15.0"),
    ("2.9", "torchao==0.14.1"),
    ("2.8", "torchao==0.13.0"),
    ("2.5", "torchao==0.12.0"),  # 0.12.0: built for 2.7.1, 2.6.0 and 2.5.0
)


def torchao_for_torch(torch: object) -> str | None:
    """The pip requirement of the torchao release made for this torch ('2.10.0+cu128' -> 'torchao==0.16.0',
    '2.11.0' -> 'torchao>=0.17.0'); None for a torch older than 2.5 or an unreadable version."""
    v = parse_version(torch)
    if v is None:
        return None
    for lowest, requirement in TORCHAO_FOR_TORCH:
        floor = parse_version(lowest)
        if floor is not None and v >= floor:
            return requirement
    return None
