"""The torch wheels: which Python each torch release has wheels for, which CUDA PyPI's torch is built with, the
kernels (arch list) each CUDA build carries, and the wheel indexes a user can install from. pick.py chooses among
INDEXES for a machine; the rules ask the predicates below (OD105 driver, OD147 GPU, OD180/OD181 Python).

Standard library only: install.sh runs this before any venv exists. Sources:
- RELEASE = pytorch RELEASE.md, "Release Compatibility Matrix" (Python per release) and "PyTorch CUDA Support
  Matrix" (CUDA builds per release, their architectures); the RFCs it follows: 2.12 drops CUDA 12.8 (pytorch
  issue 178665), 2.14 keeps 12.6 as legacy (issue 190355).
- PyPI torch's CUDA: the nvidia-* / cuda-toolkit pins in each release's wheel metadata (`pip install --dry-run
  --report torch==X`; 2.14.0 pins cuda-toolkit 13.0.3).
- Driver floors: drivers.py (the index's CUDA through minor-version compatibility).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from olmo_doctor.compat.drivers import driver_floor, driver_floor_major
from olmo_doctor.compat.release import major_minor, release

RELEASE = "https://github.com/pytorch/pytorch/blob/main/RELEASE.md"
DOWNLOAD = "https://download.pytorch.org/whl/"

# torch minor release -> (oldest Python, newest Python) with wheels, experimental builds included (RELEASE).
TORCH_PYTHON: dict[str, tuple[str, str]] = {
    "1.0": ("3.5", "3.7"), "1.1": ("3.5", "3.7"), "1.2": ("3.5", "3.7"), "1.3": ("3.5", "3.7"),
    "1.4": ("3.5", "3.8"), "1.5": ("3.5", "3.8"), "1.6": ("3.6", "3.8"), "1.7": ("3.6", "3.9"),
    "1.8": ("3.6", "3.9"), "1.9": ("3.6", "3.9"), "1.10": ("3.6", "3.9"), "1.11": ("3.7", "3.10"),
    "1.12": ("3.7", "3.10"), "1.13": ("3.7", "3.10"), "2.0": ("3.8", "3.11"), "2.1": ("3.8", "3.11"),
    "2.2": ("3.8", "3.12"), "2.3": ("3.8", "3.12"), "2.4": ("3.8", "3.12"), "2.5": ("3.9", "3.13"),
    "2.6": ("3.9", "3.13"), "2.7": ("3.9", "3.13"), "2.8": ("3.9", "3.13"), "2.9": ("3.10", "3.14"),
    "2.10": ("3.10", "3.14"), "2.11": ("3.10", "3.14"), "2.12": ("3.10", "3.14"), "2.13": ("3.10", "3.15"),
    "2.14": ("3.10", "3.15"),
}
LATEST_TORCH = "2.14"
# The releases install.sh and the "installable today" rules (OD105, OD147) consider: those built for today's
# CUDA set (12.6, 12.8, 13.0) and Python range (3.10+), from 2.9 on (RELEASE). Older indexes are listed only so
# torch_index_for_cuda can name the build matching an old toolkit.
OLDEST_CURRENT_TORCH = "2.9"

# torch minor release -> the CUDA its PyPI Linux wheel is built with (wheel metadata, as above).
PYPI_DEFAULT_CUDA: dict[str, str] = {
    "2.1": "12.1", "2.2": "12.1", "2.3": "12.1", "2.4": "12.1", "2.5": "12.4", "2.6": "12.4", "2.7": "12.6",
    "2.8": "12.8", "2.9": "12.8", "2.10": "12.8", "2.11": "13.0", "2.12": "13.0", "2.13": "13.0", "2.14": "13.0",
}

# CUDA build -> the kernels its Linux x86_64 wheels carry (RELEASE's support matrix; .ci/manywheel/build_cuda.sh:
# only the 12.6 build keeps Maxwell/Pascal/Volta, CUDA 13 cannot target them). An sm_XY cubin runs on the same
# major with minor >= Y; compute_XY (PTX) is JIT-compiled for any newer GPU.
ARCHS_X86_64: dict[str, tuple[str, ...]] = {
    "11.8": ("sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "12.1": ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "12.4": ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "12.6": ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "12.8": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
    "12.9": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
    "13.0": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
}
# The same for Linux aarch64 (SBSA) wheels; CUDA 13 adds Thor (sm_110).
ARCHS_AARCH64: dict[str, tuple[str, ...]] = {
    "12.6": ("sm_80", "sm_90"),
    "12.8": ("sm_80", "sm_90", "sm_100", "sm_120"),
    "13.0": ("sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"),
}


@dataclass(frozen=True)
class Index:
    """One place torch wheels come from: a download.pytorch.org index, or PyPI (`url` None), which carries the
    same files as `same_files_as`. Its driver floors come from drivers.py through its CUDA."""

    name: str
    url: str | None
    cuda: str | None  # None: a CPU build
    torch_first: str
    torch_last: str
    same_files_as: str | None = field(default=None)

    @property
    def driver_floor(self) -> str | None:
        """The oldest driver that runs these wheels (minor-version compatibility); None for a CPU build."""
        return driver_floor_major(self.cuda) if self.cuda else None

    @property
    def driver_ga(self) -> str | None:
        """The driver its CUDA release shipped with; between driver_floor and this, PTX JIT is limited."""
        return driver_floor(self.cuda) if self.cuda else None

    @property
    def current(self) -> bool:
        return release(self.torch_last) >= release(OLDEST_CURRENT_TORCH)

    @property
    def download_name(self) -> str:
        """The download.pytorch.org index with these files: what `pip --index-url .../whl/NAME` and the fixes use."""
        return self.same_files_as or self.name

    def archs(self, arch: str = "x86_64") -> tuple[str, ...]:
        table = ARCHS_AARCH64 if arch in ("aarch64", "arm64") else ARCHS_X86_64
        return table.get(self.cuda, ()) if self.cuda else ()


_PYPI_CUDA = PYPI_DEFAULT_CUDA[LATEST_TORCH]
INDEXES: tuple[Index, ...] = (
    # PyPI's Linux torch is the CUDA 13.0 build from 2.11 on: the cu130 wheels, the same files.
    Index("pypi", None, _PYPI_CUDA, min((t for t, c in PYPI_DEFAULT_CUDA.items() if c == _PYPI_CUDA), key=release),
          LATEST_TORCH, same_files_as="cu" + _PYPI_CUDA.replace(".", "")),
    Index("cu130", DOWNLOAD + "cu130", "13.0", "2.9", LATEST_TORCH),
    Index("cu128", DOWNLOAD + "cu128", "12.8", "2.7", "2.11"),  # not built from 2.12 (RFC 178665)
    Index("cu126", DOWNLOAD + "cu126", "12.6", "2.6", LATEST_TORCH),  # the legacy build (RFC 190355)
    Index("cu118", DOWNLOAD + "cu118", "11.8", "2.0", "2.7"),
    Index("cpu", DOWNLOAD + "cpu", None, "2.0", LATEST_TORCH),
)
CURRENT_GPU_INDEXES = tuple(i for i in INDEXES if i.cuda and i.current)
# The oldest driver any current CUDA wheel runs on (525.60.13, the CUDA 12 minor-version floor).
CURRENT_DRIVER_FLOOR: str = min((i.driver_floor for i in CURRENT_GPU_INDEXES if i.driver_floor), key=release)

_ARCH = re.compile(r"(sm|compute)_(\d+)(\d)[af]?$")


def covers(archs: object, cc: object) -> bool | None:
    """Does an arch list (['sm_80', 'compute_90', ...], torch.cuda.get_arch_list() form) run on this compute
    capability? None when the list is empty or not a list, or the cc is unreadable."""
    mm = major_minor(cc)
    if not isinstance(archs, (list, tuple)) or not archs or mm is None:
        return None
    return any(_runs_on(str(arch), mm) for arch in archs)


def _runs_on(arch: str, mm: tuple[int, int]) -> bool:
    """sm_XY runs on the same major at minor >= Y; compute_XY (PTX) is compiled for any GPU at or above it."""
    m = _ARCH.match(arch)
    if not m:
        return False
    am = (int(m.group(2)), int(m.group(3)))
    return (m.group(1) == "sm" and am[0] == mm[0] and am[1] <= mm[1]) or (m.group(1) == "compute" and am <= mm)


def torch_build_covers(archs: object, cc: object) -> bool | None:
    """Does a torch build with this arch list run on this GPU, as torch itself judges it? PTX of an older major
    is not counted: the driver could JIT it (what `covers` allows for an extension built by the toolkit at hand),
    but torch's own check counts only entries of the GPU's major (torch/cuda/__init__.py `_check_cubins` warns
    "... is not compatible with the current PyTorch installation"), and what the build bundles (cuBLAS, cuDNN,
    SASS-only CUTLASS kernels) has no code for an architecture newer than its CUDA: a cu118 torch listing
    compute_37 fails on an RTX 50xx with "no kernel image is available". None as for `covers`."""
    mm = major_minor(cc)
    if not isinstance(archs, (list, tuple)) or not archs or mm is None:
        return None
    return any(_runs_on(str(a), mm) and (m := _ARCH.match(str(a))) is not None and int(m.group(2)) == mm[0]
               for a in archs)


def driver_runs(index: Index, driver: object) -> bool:
    """Does this driver run the index's wheels? (A CPU build runs anywhere.)"""
    return index.driver_floor is None or (bool(release(driver)) and release(driver) >= release(index.driver_floor))


def python_range(torch_version: object) -> tuple[str, str] | None:
    mm = major_minor(torch_version)
    return TORCH_PYTHON.get(f"{mm[0]}.{mm[1]}") if mm else None


def python_fits(python: object, torch_version: object) -> bool | None:
    """Is there a wheel of this torch release for this Python? None when either is unknown."""
    rng, py = python_range(torch_version), major_minor(python)
    if rng is None or py is None:
        return None
    return (major_minor(rng[0]) or (0, 0)) <= py <= (major_minor(rng[1]) or (0, 0))


def python_verdict(python: object, installed_torch: object = None) -> str | None:
    """'ok' when the installed torch or the latest torch has wheels for this Python, else 'too_new' or
    'too_old' (relative to the latest torch); None when the Python version is unknown."""
    py = major_minor(python)
    if py is None:
        return None
    if python_fits(python, installed_torch) or python_fits(python, LATEST_TORCH):
        return "ok"
    return "too_new" if py > (major_minor(TORCH_PYTHON[LATEST_TORCH][1]) or (0, 0)) else "too_old"


def gpu_has_wheel(cc: object, arch: str = "x86_64") -> bool | None:
    """Does any current CUDA wheel carry kernels for this compute capability? None when the cc is unknown."""
    if major_minor(cc) is None:
        return None
    return any(torch_build_covers(i.archs(arch), cc) for i in CURRENT_GPU_INDEXES)


def driver_has_wheel(driver: object) -> bool | None:
    """Does this driver run any current CUDA wheel? None when the driver version is unreadable."""
    if not release(driver):
        return None
    return any(driver_runs(i, driver) for i in CURRENT_GPU_INDEXES)


def torch_index_for_cuda(cuda: object) -> str | None:
    """The download.pytorch.org index whose torch has this CUDA toolkit's major, at or below it where one is
    ('12.9' -> 'cu128', '12.4' -> 'cu126', '13.2' -> 'cu130', '11.8' -> 'cu118'): what an extension built by
    that nvcc must be paired with. None for a major no index has."""
    mm = major_minor(cuda)
    if mm is None:
        return None
    same = sorted((i for i in INDEXES if i.cuda and i.url and _cuda_of(i)[0] == mm[0]), key=lambda i: release(i.cuda))
    below = [i for i in same if _cuda_of(i) <= mm]
    return (below[-1] if below else same[0]).name if same else None


def _cuda_of(index: Index) -> tuple[int, int]:
    return major_minor(index.cuda) or (0, 0)


def pypi_default_cuda(torch_version: object) -> str | None:
    """The CUDA of PyPI's Linux wheel of this torch release ('2.11.0' -> '13.0'); None before 2.1."""
    mm = major_minor(torch_version)
    return PYPI_DEFAULT_CUDA.get(f"{mm[0]}.{mm[1]}") if mm else None
