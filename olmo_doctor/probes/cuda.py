"""CUDA toolkit facts: which nvcc builds extensions, its version, and the newest GCC it accepts.

CUDA_HOME is resolved the way torch.utils.cpp_extension does (CUDA_HOME, CUDA_PATH, the nvcc on PATH, then
/usr/local/cuda). The version comes from the toolkit's version.json when present (no subprocess), else from
`nvcc --version`; the GCC limit is read from the real crt/host_config.h, with olmo_doctor/compat/nvcc.py as the
fallback.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from olmo_common.bounded.data import load_json
from olmo_common.bounded.files import open_regular, read_text
from olmo_doctor.compat.nvcc import nvcc_max_gcc
from olmo_doctor.compat.release import major_minor
from olmo_doctor.facts import Facts, FactValue
from olmo_doctor.isolation import which
from olmo_doctor.run import Runner

NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V([\d.]+)")
HOST_CONFIG_GCC = re.compile(r"#if\s+__GNUC__\s*>\s*(\d+)")


def resolve_cuda_home() -> str | None:
    """Exactly torch.utils.cpp_extension._find_cuda_home (no realpath: a wrapper script in /usr/local/bin
    makes torch pick /usr/local, which has no CUDA headers, and we must see what torch sees)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc))
    return "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None


def nvcc_version(nvcc: str, run: Runner) -> tuple[str | None, str | None]:
    """(major.minor, full) for an nvcc binary; version.json first since it costs no process."""
    root = Path(os.path.realpath(nvcc)).parent.parent
    try:
        data = load_json(root / "version.json", "toolkit file")
        full = data.get("cuda_nvcc", {}).get("version") or data.get("cuda", {}).get("version")
        if full:
            mm = major_minor(full)
            return (f"{mm[0]}.{mm[1]}" if mm else None), full
    except (OSError, ValueError, RecursionError):
        pass
    out = run([nvcc, "--version"])
    m = NVCC_RELEASE.search(out.stdout) if out.ok else None
    return (m.group(1), m.group(2)) if m else (None, None)


def host_config_max_gcc(cuda_root: str | None) -> int | None:
    if not cuda_root:
        return None
    for rel in ("include/crt/host_config.h", "targets/x86_64-linux/include/crt/host_config.h",
                "targets/sbsa-linux/include/crt/host_config.h"):
        try:
            text = read_text(Path(cuda_root) / rel, "toolkit file", errors="replace")
        except OSError:
            continue
        m = HOST_CONFIG_GCC.search(text)
        if m:
            return int(m.group(1))
    return None


def _has_headers(root: str | None) -> bool:
    return bool(root) and os.path.isfile(os.path.join(str(root), "include", "cuda_runtime.h"))


def toolkit_root(home: str | None, nvcc: str | None) -> str | None:
    """The real toolkit directory nvcc belongs to: CUDA_HOME when it holds headers, else the nvcc's own
    install (following symlinks and one level of `exec /path/nvcc` wrapper scripts), else /usr/local/cuda."""
    if _has_headers(home):
        return home
    candidates: list[str] = []
    if nvcc:
        real = os.path.realpath(nvcc)
        candidates.append(os.path.dirname(os.path.dirname(real)))
        try:
            with open_regular(real) as f:  # nvcc may be anything on PATH: a FIFO must not hang the probe
                head = f.read(4096)
            if head.startswith(b"#!"):
                m = re.search(rb"(/\S+)/bin/nvcc\b", head)
                if m:
                    candidates.append(m.group(1).decode(errors="replace"))
        except OSError:
            pass
    candidates.append("/usr/local/cuda")
    return next((c for c in candidates if _has_headers(c)), None)


def _nvcc_facts(nvcc: str, root: FactValue, run: Runner) -> Facts:
    """nvcc's version and the newest gcc it accepts (from its toolkit's host_config.h, else the table)."""
    version, full = nvcc_version(nvcc, run)
    root = root or str(Path(os.path.realpath(nvcc)).parent.parent)
    return {"nvcc.version": version, "nvcc.full_version": full,
            "nvcc.max_gcc": host_config_max_gcc(str(root)) or nvcc_max_gcc(version)}


def _home_nvcc(home: str | None) -> str | None:
    """CUDA_HOME's nvcc when it is there and can run."""
    path = os.path.join(home, "bin", "nvcc") if home else None
    return path if path and os.access(path, os.X_OK) else None


def probe(run: Runner) -> Facts:
    home = resolve_cuda_home()
    on_path = which("nvcc")
    home_nvcc = _home_nvcc(home)
    nvcc = home_nvcc or on_path
    facts: Facts = {
        "cuda.home": home,
        "cuda.home_env": os.environ.get("CUDA_HOME"),
        "nvcc.on_path": on_path,
        "nvcc.path": nvcc,
        "nvcc.version": None,
        "nvcc.full_version": None,
        "nvcc.max_gcc": None,
        "cuda.home_nvcc_version": None,
        "cuda.home_has_headers": _has_headers(home) if home else None,
        "cuda.toolkit_root": toolkit_root(home, nvcc),
    }
    if nvcc:
        facts.update(_nvcc_facts(nvcc, facts["cuda.toolkit_root"], run))
    if home_nvcc:
        facts["cuda.home_nvcc_version"] = facts["nvcc.version"]
    if on_path and nvcc and os.path.realpath(on_path) != os.path.realpath(nvcc):
        # two toolkits: the one on PATH and the one CUDA_HOME names; record the PATH one's version separately
        facts["nvcc.on_path_version"] = nvcc_version(on_path, run)[0]
    return facts
