"""NVIDIA Linux driver floors per CUDA release: the one table every driver question reads (the rules' driver
checks, the driver floor of each torch wheel index in wheels.py, and install.sh's choice through pick.py).

Standard library only (install.sh runs it before any venv exists).
"""

from __future__ import annotations

from olmo_doctor.compat.release import at_or_below, major_minor, release

RELEASE_NOTES = "https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html"
MINOR_VERSION_COMPAT = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"

# CUDA toolkit GA release -> the minimum Linux x86_64 driver it shipped with ("CUDA Toolkit and Corresponding Driver
# Versions", Table 3 of RELEASE_NOTES). There is no CUDA 12.7. Rows in ascending order.
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

# CUDA major -> the oldest driver that runs any release of that major ("applications ... can run, with limited
# feature-set, on systems having at least the minimum required driver": MINOR_VERSION_COMPAT; PTX JIT of newer
# code is what is limited). Below its GA floor a release runs through this, above this floor it cannot start.
DRIVER_FLOOR_MAJOR: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def driver_floor(cuda: object) -> str | None:
    """GA driver floor of a CUDA 'major.minor': the nearest listed release of the same major at or below it
    ('12.7' -> 12.6's 560.28.03); None for a major the table does not list."""
    mm = major_minor(cuda)
    if mm is None:
        return None
    same_major = [(c, f) for c, f in DRIVER_FLOOR_LINUX.items() if (major_minor(c) or (0, 0))[0] == mm[0]]
    return at_or_below(same_major, cuda)


def driver_floor_major(cuda: object) -> str | None:
    """Minor-version compatibility floor of a CUDA release's major ('12.8' -> '525.60.13')."""
    mm = major_minor(cuda)
    return DRIVER_FLOOR_MAJOR.get(mm[0]) if mm else None


def driver_runs_cuda(driver: object, cuda: object) -> bool | None:
    """Can this driver start a CUDA `cuda` runtime at all (minor-version compatibility included)? None when either
    is unreadable or the major is not in the table."""
    floor = driver_floor_major(cuda)
    if floor is None or not release(driver):
        return None
    return release(driver) >= release(floor)


def newest_cuda_for_driver(driver: object) -> str | None:
    """The newest CUDA release whose GA floor this driver meets ('570.124.06' -> '12.8'), as nvidia-smi's "CUDA
    Version" field says; None below every listed floor."""
    rows = sorted(((f, c) for c, f in DRIVER_FLOOR_LINUX.items()), key=lambda row: release(row[0]))
    return at_or_below(rows, driver, key=release)
