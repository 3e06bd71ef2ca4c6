"""The torch wheels a user can install today, and which one fits a machine: the one table behind both
`install.sh` (which runs `python3 -m olmo_doctor.wheels pick ...` before any venv exists) and the rules
(OD105 driver, OD147 GPU, OD181 Python).

Standard library only, for the same reason. Sources:
- Python range per torch release and the CUDA builds of each: pytorch RELEASE.md, "Release Compatibility Matrix"
  and "PyTorch CUDA Support Matrix" (https://github.com/pytorch/pytorch/blob/main/RELEASE.md).
- Driver floors: CUDA toolkit release notes Table 3 (GA floors) and minor-version compatibility ("any 12.x
  driver >= 525.60.13 runs a 12.x application; 13.x needs >= 580") at
  https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

# torch minor release -> (oldest Python, newest Python) with wheels, experimental builds included (RELEASE.md).
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
DOWNLOAD = "https://download.pytorch.org/whl/"

_X86_CU12 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
_X86_CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
_X86_CU13 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
_ARM_CU12 = ["sm_80", "sm_90"]
_ARM_CU13 = ["sm_80", "sm_90", "sm_100", "sm_110", "sm_120", "compute_120"]


@dataclass(frozen=True)
class Index:
    """One place torch wheels come from. `driver_floor` is the oldest Linux driver that runs them (minor-version
    compatibility); `driver_ga` the floor the CUDA release shipped with (below it some features are limited)."""

    name: str
    url: str | None  # None: PyPI, pip's default index
    cuda: str | None  # None: a CPU build
    torch_first: str
    torch_last: str
    driver_floor: str | None
    driver_ga: str | None
    archs: tuple[str, ...]
    archs_aarch64: tuple[str, ...]


INDEXES: tuple[Index, ...] = (
    # PyPI's Linux torch is the CUDA 13.0 build from 2.11 on (the cu130 wheels, same files).
    Index("pypi", None, "13.0", "2.11", LATEST_TORCH, "580.65.06", "580.65.06", tuple(_X86_CU13), tuple(_ARM_CU13)),
    Index("cu130", DOWNLOAD + "cu130", "13.0", "2.9", LATEST_TORCH, "580.65.06", "580.65.06",
          tuple(_X86_CU13), tuple(_ARM_CU13)),
    Index("cu128", DOWNLOAD + "cu128", "12.8", "2.7", "2.11", "525.60.13", "570.26", tuple(_X86_CU128),
          (*_ARM_CU12, "sm_100", "sm_120")),
    Index("cu126", DOWNLOAD + "cu126", "12.6", "2.6", LATEST_TORCH, "525.60.13", "560.28.03", tuple(_X86_CU12),
          tuple(_ARM_CU12)),
    Index("cpu", DOWNLOAD + "cpu", None, "2.0", LATEST_TORCH, None, None, (), ()),
)
GPU_INDEXES = tuple(i for i in INDEXES if i.cuda)


def _key(text: object) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); '3.12.3' -> (3, 12, 3); () when there are no digits."""
    m = re.search(r"\d+(?:\.\d+)*", str(text or ""))
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


# The oldest driver any current CUDA wheel runs on (525.60.13, the CUDA 12 minor-version floor).
CURRENT_DRIVER_FLOOR: str = min((i.driver_floor for i in GPU_INDEXES if i.driver_floor), key=_key)


def _mm(text: object) -> tuple[int, int] | None:
    k = _key(text)
    return (k[0], k[1] if len(k) > 1 else 0) if k else None


def covers(archs: tuple[str, ...] | list[str], cc: object) -> bool:
    """Does an arch list run on this compute capability? A cubin sm_XY runs on the same major with minor >= Y;
    PTX compute_XY is JIT-compiled for any newer GPU."""
    mm = _mm(cc)
    if mm is None:
        return False
    for arch in archs:
        m = re.match(r"(sm|compute)_(\d+)(\d)[af]?$", arch)
        if not m:
            continue
        am = (int(m.group(2)), int(m.group(3)))
        if (m.group(1) == "sm" and am[0] == mm[0] and am[1] <= mm[1]) or (m.group(1) == "compute" and am <= mm):
            return True
    return False


def _archs(index: Index, arch: str) -> tuple[str, ...]:
    return index.archs_aarch64 if arch in ("aarch64", "arm64") else index.archs


def driver_runs(index: Index, driver: object) -> bool:
    return index.driver_floor is None or (bool(_key(driver)) and _key(driver) >= _key(index.driver_floor))


def python_range(torch_version: object) -> tuple[str, str] | None:
    mm = _mm(torch_version)
    return TORCH_PYTHON.get(f"{mm[0]}.{mm[1]}") if mm else None


def python_fits(python: object, torch_version: object) -> bool | None:
    """Is there a wheel of this torch release for this Python? None when either is unknown."""
    rng, py = python_range(torch_version), _mm(python)
    if rng is None or py is None:
        return None
    return _mm(rng[0]) <= py <= _mm(rng[1])  # type: ignore[operator]


def python_verdict(python: object, installed_torch: object = None) -> str | None:
    """'ok' when the installed torch or the latest torch has wheels for this Python, else 'too_new' or
    'too_old' (relative to the latest torch); None when the Python version is unknown."""
    py = _mm(python)
    if py is None:
        return None
    if python_fits(python, installed_torch) or python_fits(python, LATEST_TORCH):
        return "ok"
    high = TORCH_PYTHON[LATEST_TORCH][1]
    return "too_new" if py > _mm(high) else "too_old"  # type: ignore[operator]


def gpu_has_wheel(cc: object, arch: str = "x86_64") -> bool | None:
    """Does any current CUDA wheel carry kernels for this compute capability? None when the cc is unknown."""
    if _mm(cc) is None:
        return None
    return any(covers(_archs(i, arch), cc) for i in GPU_INDEXES)


def driver_has_wheel(driver: object) -> bool | None:
    if not _key(driver):
        return None
    return any(driver_runs(i, driver) for i in GPU_INDEXES)


@dataclass(frozen=True)
class Pick:
    """What install.sh should install, or why nothing can work (`refuse` names the rule to explain)."""

    index: Index | None
    torch: str
    why: str
    refuse: str | None = None


def pick(driver: object, ccs: list[str | None], python: object, arch: str = "x86_64") -> Pick:
    """The wheel index for a machine: no GPU -> cpu; else among the indexes this driver runs whose kernels cover
    every GPU, the one offering the newest torch (then the newest CUDA, then PyPI as the simplest)."""
    py_ok = python_fits(python, LATEST_TORCH)
    if py_ok is False:
        verdict = python_verdict(python)
        low, high = TORCH_PYTHON[LATEST_TORCH]
        return Pick(None, "", f"Python {python} is {'newer' if verdict == 'too_new' else 'older'} than any current "
                    f"torch supports ({low}-{high})", "OD181" if verdict == "too_new" else "OD180")
    if driver is None:
        cpu = next(i for i in INDEXES if i.name == "cpu")
        return Pick(cpu, "torch", "no NVIDIA GPU found: the CPU build")
    if not driver_has_wheel(driver):
        return Pick(None, "", f"NVIDIA driver {driver} runs no current torch wheel (CUDA 12 wheels need >= "
                    f"{CURRENT_DRIVER_FLOOR}, CUDA 13 >= 580.65.06)", "OD105")
    known = [cc for cc in ccs if cc]
    for cc in known:
        if not gpu_has_wheel(cc, arch):
            return Pick(None, "", f"no current torch wheel has kernels for compute capability {cc}", "OD147")
    fits = [i for i in GPU_INDEXES if driver_runs(i, driver) and all(covers(_archs(i, arch), cc) for cc in known)]
    if not fits:
        return Pick(None, "", f"no single torch wheel runs on driver {driver} with GPUs {', '.join(known)}", "OD147")
    best = max(fits, key=lambda i: (_key(i.torch_last), _key(i.cuda), i.url is None))
    spec = "torch" if best.torch_last == LATEST_TORCH else f"torch<{_next_minor(best.torch_last)}"
    why = (f"driver {driver} runs CUDA {best.cuda} wheels (needs >= {best.driver_floor})"
           + (f"; their kernels cover compute capability {', '.join(sorted(set(known)))}" if known else "")
           + ("" if known else "; GPU compute capability unknown, assuming a current GPU"))
    return Pick(best, spec, why)


def _next_minor(version: str) -> str:
    mm = _mm(version) or (0, 0)
    return f"{mm[0]}.{mm[1] + 1}"


def main(argv: list[str] | None = None) -> int:
    """`pick`: print key=value lines (index, url, torch, why) for install.sh; exit 3 with refuse=CODE when no
    current wheel can work on this machine."""
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m olmo_doctor.wheels")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick", help="the torch wheel index for this machine")
    p.add_argument("--driver", help="NVIDIA driver version; omit when there is no NVIDIA GPU")
    p.add_argument("--gpu", action="append", default=[], help="'NAME|CC' per GPU (CC may be empty)")
    p.add_argument("--python", required=True, help="Python version of the interpreter to use")
    p.add_argument("--arch", default="x86_64")
    args = ap.parse_args(argv)
    from olmo_doctor.gpus import name_to_cc

    ccs: list[str | None] = []
    for gpu in args.gpu:
        name, _, cc = gpu.rpartition("|") if "|" in gpu else (gpu, "", "")
        ccs.append(cc.strip() if re.fullmatch(r"\d+\.\d+", cc.strip()) else name_to_cc(name))
    if args.driver is not None and not _key(args.driver):
        print(f"olmo_doctor.wheels: driver version {args.driver!r} is not a version", file=sys.stderr)
        return 2
    choice = pick(args.driver, ccs, args.python, args.arch)
    unknown = [g.rpartition("|")[0] or g for g, cc in zip(args.gpu, ccs) if cc is None]  # noqa: B905 (runs on old Pythons)
    lines = {"why": choice.why, "unknown_gpus": "; ".join(unknown)}
    if choice.refuse or choice.index is None:
        lines["refuse"] = choice.refuse or "OD147"
    else:
        lines.update(index=choice.index.name, url=choice.index.url or "", torch=choice.torch)
    for key, value in lines.items():
        print(f"{key}={' '.join(str(value).split())}")
    return 3 if "refuse" in lines else 0


if __name__ == "__main__":
    sys.exit(main())
