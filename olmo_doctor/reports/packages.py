"""Package lines of a pasted report: collect_env's `[pip3] name==1.2`, `[pip] name (1.2)` (pip's legacy list
format, torch 0.4), `[conda] name  1.2  build  channel`, and the facts they imply.

A package a report does not list is unknown, not absent: collect_env only lists names matching its patterns
(torch, numpy, nvidia-*, ...), so ninja or flash-attn missing from the list says nothing.
"""

from __future__ import annotations

import re

from olmo_doctor.facts import Facts

# `(.*\S)` rather than `(.+?)\s*$`: a lazy group before a trailing run re-scans that run at every step (quadratic
# on a line of 20 000 spaces)
_LINE = re.compile(r"^\s*\[(pip3?|conda)\]\s+(.*\S)")
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


def listed(lines: list[str]) -> dict[str, tuple[str, str]]:
    """name -> (version, manager) for each package line; pip lines win over conda ones for the same name."""
    out: dict[str, tuple[str, str]] = {}
    for line in lines:
        m = _LINE.match(line)
        if not m:
            if bare := _BARE.match(line):
                out.setdefault(re.sub(r"[-_.]+", "-", bare.group(1)).lower(), (bare.group(2), "pip"))
            continue
        manager, body = m.group(1), m.group(2)
        for form in _FORMS:
            if pm := form.match(body):
                name = re.sub(r"[-_.]+", "-", pm.group(1)).lower()
                if name not in out or (manager != "conda" and out[name][1] == "conda"):
                    out[name] = (pm.group(2), manager)
                break
    return out


# conda's pytorch build string says what it was built for: py3.10_cuda11.8_cudnn8.7.0_0, py3.10_cpu_0,
# cuda120_py311h...; conda-forge's names the CUDA without a dot (cuda120 is 12.0)
_CONDA_TORCH = re.compile(r"^\s*\[conda\]\s+pytorch\s+\d\S*\s+(\S+)", re.I)


def _conda_build(lines: list[str]) -> str | None:
    for line in lines:
        if m := _CONDA_TORCH.match(line):
            build = m.group(1).lower()
            c = (re.search(r"(?:^|_)cuda(\d{1,2})\.(\d)(?:[._]|$)", build)
                 or re.search(r"(?:^|_)cuda(\d{2})(\d)_", build))
            if c:
                return f"{int(c.group(1))}.{c.group(2)}"
            if re.search(r"(?:^|_)cpu(?:_|$)", build):
                return "cpu"
    return None


def read(lines: list[str], f: Facts) -> None:
    pkgs = listed(lines)
    for name, key in _VERSION_FACT.items():
        if name in pkgs and re.match(r"\d", pkgs[name][0]):
            f[key] = pkgs[name][0]
    torch = pkgs.get("torch") or pkgs.get("pytorch")
    if "torch.version" not in f and torch and re.match(r"\d+\.\d+", torch[0]):
        f["torch.version"] = torch[0]  # a partial report: the package list still names torch
    if "torch.cuda" not in f and (build := _conda_build(lines)) is not None:
        f["torch.cuda"] = None if build == "cpu" else build
    for cu in ("cu13", "cu12", "cu11", ""):
        nccl = pkgs.get(f"nvidia-nccl-{cu}".rstrip("-"))
        if nccl and "torch.nccl" not in f and (m := re.match(r"\d+\.\d+\.\d+", nccl[0])):
            f["torch.nccl"] = m.group(0)
        cudnn = pkgs.get(f"nvidia-cudnn-{cu}".rstrip("-"))
        if cudnn and "torch.cudnn" not in f and (m := re.match(r"\d+\.\d+\.\d+", cudnn[0])):
            f["torch.cudnn"] = m.group(0)
    if any(manager == "conda" for _, manager in pkgs.values()):
        f["os.conda_env"] = "conda"
