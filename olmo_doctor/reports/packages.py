"""Package lines of a pasted report: collect_env's `[pip3] name==1.2`, `[pip] name (1.2)` (pip's legacy list
format, torch 0.4), `[conda] name  1.2  build  channel`, and the facts they imply.

A package a report does not list is unknown, not absent: collect_env only lists names matching its patterns
(torch, numpy, nvidia-*, ...), so ninja or flash-attn missing from the list says nothing.
"""

from __future__ import annotations

import re

from olmo_doctor.facts import Facts

# `(\S.*)` (trailing blanks stripped in code): `(.*\S)` after `\s+` re-scans a blank run for every blank it could
# give back, and `(.+?)\s*$` at every step: both quadratic on a line of 20 000 spaces
_LINE = re.compile(r"^\s*\[(pip3?|conda)\]\s+(\S.*)")
_FORMS = (
    re.compile(r"([A-Za-z0-9][\w.\-]*)\s*==\s*([^\s;]+)"),  # pip freeze
    re.compile(r"([A-Za-z0-9][\w.\-]*)\s+\(([^)\s,]+)"),  # pip list --format=legacy
    re.compile(r"([A-Za-z0-9][\w.\-]*)\s+(\d[^\s]*)"),  # conda list columns
)
# normalised package name -> fact key of its version
_VERSION_FACT = {"flash-attn": "flash_attn.version", "xformers": "xformers.version", "torchao": "torchao.version",
                 "ninja": "ninja.version", "setuptools": "setuptools.version", "wheel": "wheel.version",
                 "packaging": "packaging.version", "pip": "pip.version"}


# `pip freeze` / `pip list` output pasted below the report, untagged: read only for the names we judge, which
# are unambiguous on a line of their own.
_BARE = re.compile(r"^\s*(flash[-_]attn|xformers|torchao|ninja|setuptools|wheel|packaging)(?:\s*==\s*|\s+)"
                   r"(\d[^\s]*)\s*$", re.I)


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _tagged(body: str) -> tuple[str, str] | None:
    """(name, version) of a tagged package line's body, in whichever of the three forms it is written."""
    for form in _FORMS:
        if pm := form.match(body):
            return _name(pm.group(1)), pm.group(2)
    return None


def listed(lines: list[str]) -> dict[str, tuple[str, str]]:
    """name -> (version, manager) for each package line; pip lines win over conda ones for the same name."""
    out: dict[str, tuple[str, str]] = {}
    for line in lines:
        m = _LINE.match(line)
        if not m:
            if bare := _BARE.match(line.lstrip()):
                out.setdefault(_name(bare.group(1)), (bare.group(2), "pip"))
            continue
        manager, found = m.group(1), _tagged(m.group(2).rstrip())
        if found is None:
            continue
        name, version = found
        if name not in out or (manager != "conda" and out[name][1] == "conda"):
            out[name] = (version, manager)
    return out


# conda's pytorch build string says what it was built for: py3.10_cuda11.8_cudnn8.7.0_0, py3.10_cpu_0,
# cuda120_py311h...; conda-forge's and Anaconda's name the CUDA without a dot (cuda120 is 12.0, gpu_cuda121py312h...)
_CONDA_TORCH = re.compile(r"^\s*\[conda\]\s+pytorch\s+\d\S*\s+(\S+)", re.I)


def _conda_build(lines: list[str]) -> str | None:
    for line in lines:
        if m := _CONDA_TORCH.match(line):
            build = m.group(1).lower()
            c = (re.search(r"(?:^|_)cuda(\d{1,2})\.(\d)(?:[._]|$)", build)
                 or re.search(r"(?:^|_)cuda(\d{2})(\d)(?:_|py)", build))
            if c:
                return f"{int(c.group(1))}.{c.group(2)}"
            if re.search(r"(?:^|_)cpu(?:_|$)", build):
                return "cpu"
    return None


_CONDA_PY = re.compile(r"(?:^|_)py(3)\.?(\d{1,2})(?:_|h|$)")


def _conda_python(lines: list[str]) -> str | None:
    """The env's Python from torch's conda build string: py3.12_cuda12.1_cudnn9.1.0_0, cuda126_py312h1763f6d_306."""
    for line in lines:
        if (m := _CONDA_TORCH.match(line)) and (p := _CONDA_PY.search(m.group(1).lower())):
            return f"{p.group(1)}.{p.group(2)}"
    return None


def _cuda_libraries(pkgs: dict[str, tuple[str, str]], f: Facts) -> None:
    """torch's NCCL and cuDNN as x.y.z, from the first nvidia-nccl/cudnn-cu13/cu12/cu11 (or unsuffixed) wheel."""
    for cu in ("cu13", "cu12", "cu11", ""):
        for family, key in (("nccl", "torch.nccl"), ("cudnn", "torch.cudnn")):
            found = pkgs.get(f"nvidia-{family}-{cu}".rstrip("-"))
            if found and key not in f and (m := re.match(r"\d+\.\d+\.\d+", found[0])):
                f[key] = m.group(0)


def _torch(lines: list[str], pkgs: dict[str, tuple[str, str]], f: Facts) -> None:
    """torch's version and CUDA where the report's own fields did not say: a partial report's package list still
    names torch, and conda's build string says what it was built for."""
    torch = pkgs.get("torch") or pkgs.get("pytorch")
    if "torch.version" not in f and torch and re.match(r"\d+\.\d+", torch[0]):
        f["torch.version"] = torch[0]
    if "torch.cuda" not in f and (build := _conda_build(lines)) is not None:
        f["torch.cuda"] = None if build == "cpu" else build
    if "python.version" not in f and (python := _conda_python(lines)) is not None:
        f["python.version"] = python


def read(lines: list[str], f: Facts) -> None:
    pkgs = listed(lines)
    for name, key in _VERSION_FACT.items():
        if name in pkgs and re.match(r"\d", pkgs[name][0]):
            f[key] = pkgs[name][0]
    _torch(lines, pkgs, f)
    _cuda_libraries(pkgs, f)
    if any(manager == "conda" for _, manager in pkgs.values()):
        f["os.conda_env"] = "conda"
