"""Which torch wheel index fits a machine: the one answer install.sh (through `python3 -m olmo_doctor.compat
pick`, before any venv exists) and the rules' fixes (`torch_index()` in rules/expr.py) both give.

Among the current indexes this driver runs whose kernels cover every GPU and which have wheels for this Python,
the one offering the newest torch, then the newest CUDA, then PyPI as the simplest. So driver 570.26 on an H100
gets cu126 (torch 2.14) rather than cu128 (whose last torch is 2.11), and only a Blackwell GPU there gets cu128.

Standard library only.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from olmo_doctor.compat.drivers import driver_floor_major
from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.compat.release import major_minor, release
from olmo_doctor.compat.wheels import (
    CURRENT_DRIVER_FLOOR,
    CURRENT_GPU_INDEXES,
    INDEXES,
    LATEST_TORCH,
    TORCH_PYTHON,
    Index,
    driver_has_wheel,
    driver_runs,
    gpu_has_wheel,
    python_fits,
    python_verdict,
    torch_build_covers,
)


@dataclass(frozen=True)
class Pick:
    """What to install, or why nothing current can work (`refuse` names the rule to explain). With a driver no
    current wheel runs on (OD105), `fallback` is the newest older build it does run, if any (cu118: torch 2.7)."""

    index: Index | None
    torch: str
    why: str
    refuse: str | None = None
    fallback: Index | None = None


def _refuse(code: str, why: str, fallback: Index | None = None) -> Pick:
    return Pick(None, "", why, code, fallback)


def _python_refusal(python: object) -> Pick | None:
    if python_fits(python, LATEST_TORCH) is not False:
        return None
    verdict = python_verdict(python)
    low, high = TORCH_PYTHON[LATEST_TORCH]
    return _refuse("OD181" if verdict == "too_new" else "OD180", f"Python {python} is "
                   f"{'newer' if verdict == 'too_new' else 'older'} than any current torch supports ({low}-{high})")


def _fits(indexes: Sequence[Index], driver: object, ccs: list[str], python: object, arch: str) -> Index | None:
    """Among these indexes, the one the driver runs, whose kernels cover every GPU and which has wheels for the
    Python, offering the newest torch (then the newest CUDA, then PyPI as the simplest); None when none does."""
    fits = [i for i in indexes if (driver is None or driver_runs(i, driver))
            and all(torch_build_covers(i.archs(arch), cc) for cc in ccs)
            and python_fits(python, i.torch_last) is not False]
    return max(fits, key=lambda i: (release(i.torch_last), release(i.cuda), i.url is None)) if fits else None


def _spec(index: Index) -> str:
    return "torch" if index.torch_last == LATEST_TORCH else f"torch<{_next_minor(index.torch_last)}"


def _driver_refusal(driver: object, ccs: list[str], python: object, arch: str) -> Pick:
    legacy = [i for i in INDEXES if i.cuda and not i.current]
    fallback = _fits(legacy, driver, ccs, python, arch)
    why = (f"NVIDIA driver {driver} runs no current torch wheel (CUDA 12 wheels need >= {CURRENT_DRIVER_FLOOR}, "
           f"CUDA 13 >= {driver_floor_major('13.0')})")
    if fallback:
        why += (f"; the newest torch it runs is {fallback.torch_last} from the {fallback.name} index "
                f"(--torch-index {fallback.url} --torch '{_spec(fallback)}')")
    return _refuse("OD105", why, fallback)


def choose(driver: object, ccs: Sequence[str | None], python: object = None, arch: str = "x86_64") -> Pick:
    """The wheel index for an NVIDIA machine, or the first reason none fits: the Python (OD180/OD181), the driver
    (OD105), a GPU no current wheel has kernels for (OD147), or no one index fitting them together (OD148).
    `driver` None: not known, any current driver assumed; a cc None: not known, a current GPU assumed; `python`
    None: not known, not checked."""
    known = [cc for cc in ccs if cc]
    refused = _python_refusal(python)
    if refused:
        return refused
    if driver is not None and not driver_has_wheel(driver):
        return _driver_refusal(driver, known, python, arch)
    for cc in known:
        if not gpu_has_wheel(cc, arch):
            return _refuse("OD147", f"no current torch wheel has kernels for compute capability {cc}")
    best = _fits(CURRENT_GPU_INDEXES, driver, known, python, arch)
    if best is None:  # each part has a wheel, but no one index fits them all
        return _no_single_fit(driver, known, python)
    return Pick(best, _spec(best), _why(best, driver, known))


def _no_single_fit(driver: object, known: list[str], python: object) -> Pick:
    parts = [f"driver {driver}"] * (driver is not None) + [f"compute capability {', '.join(known)}"] * bool(
        known) + [f"Python {python}"] * bool(python)
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)
    return _refuse("OD148", f"no single current torch wheel fits {listed} together")


def _why(best: Index, driver: object, known: list[str]) -> str:
    """Why this index: the driver runs its CUDA, its kernels cover the GPUs."""
    why = (f"driver {driver} runs CUDA {best.cuda} wheels (needs >= {best.driver_floor})" if driver is not None
           else f"CUDA {best.cuda} wheels, for a driver >= {best.driver_floor}")
    return why + (f"; their kernels cover compute capability {', '.join(sorted(set(known)))}" if known else
                  "; GPU compute capability unknown, assuming a current GPU")


def pick(driver: object, ccs: Sequence[str | None], python: object, arch: str = "x86_64") -> Pick:
    """install.sh's question: no NVIDIA driver -> the CPU build; else choose()."""
    if driver is None:
        refused = _python_refusal(python)
        cpu = next(i for i in INDEXES if i.name == "cpu")
        return refused or Pick(cpu, "torch", "no NVIDIA GPU found: the CPU build")
    return choose(driver, ccs, python, arch)


def torch_index(driver: object, ccs: Sequence[str | None], python: object = None, arch: str = "x86_64") -> str | None:
    """choose()'s index as a download.pytorch.org name ('cu126'; PyPI's files are cu130's), or its fallback when
    the driver runs no current wheel: what the fix commands and the reinstall_torch action install. None when
    nothing fits."""
    chosen = choose(driver, ccs, python, arch)
    index = chosen.index or chosen.fallback
    return index.download_name if index else None


def _next_minor(version: str) -> str:
    mm = major_minor(version) or (0, 0)
    return f"{mm[0]}.{mm[1] + 1}"


def gpu_ccs(gpus: Sequence[str]) -> list[str | None]:
    """'NAME|CC' per GPU (CC may be empty, as old nvidia-smi leaves it) -> compute capabilities, the name looked up
    in gpus.py when the CC is missing; None where neither says."""
    ccs: list[str | None] = []
    for gpu in gpus:
        name, _, cc = gpu.rpartition("|") if "|" in gpu else (gpu, "", "")
        ccs.append(cc.strip() if re.fullmatch(r"\d+\.\d+", cc.strip()) else name_to_cc(name))
    return ccs


@functools.cache
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m olmo_doctor.compat")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick", help="the torch wheel index for this machine")
    p.add_argument("--driver", help="NVIDIA driver version; omit when there is no NVIDIA GPU")
    p.add_argument("--gpu", action="append", default=[], help="'NAME|CC' per GPU (CC may be empty)")
    p.add_argument("--python", required=True, help="Python version of the interpreter to use")
    p.add_argument("--arch", default="x86_64")
    return ap


def _answer(choice: Pick) -> dict[str, str]:
    """refuse=CODE, or the index, its URL and the torch requirement to install from it."""
    if choice.refuse or choice.index is None:
        return {"refuse": choice.refuse or "OD147"}
    return {"index": choice.index.name, "url": choice.index.url or "", "torch": choice.torch}


def main(argv: list[str] | None = None) -> int:
    """`pick`: print key=value lines (index, url, torch, why) for install.sh; exit 3 with refuse=CODE when no
    current wheel can work on this machine."""
    args = _parser().parse_args(argv)
    if args.driver is not None and not release(args.driver):
        print(f"olmo_doctor.compat: driver version {args.driver!r} is not a version", file=sys.stderr)
        return 2
    ccs = gpu_ccs(args.gpu)
    choice = pick(args.driver, ccs, args.python, args.arch)
    unknown = [g.rpartition("|")[0] or g for g, cc in zip(args.gpu, ccs) if cc is None]  # noqa: B905 (runs on old Pythons)
    lines = {"why": choice.why, "unknown_gpus": "; ".join(unknown), **_answer(choice)}
    for key, value in lines.items():
        print(f"{key}={' '.join(str(value).split())}")
    return 3 if "refuse" in lines else 0
