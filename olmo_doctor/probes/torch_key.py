"""The key of the torch-facts cache: every input the torch worker's answer depends on, so a cached answer is
never stale.

The worker's answer (does CUDA start, does an allocation succeed, does each kernel load) depends on:
- the environment variables torch, the CUDA runtime and driver, NCCL, Triton, inductor, the dynamic loader and
  Python read (`ENV_PREFIXES`, `ENV_NAMES`): CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, LD_LIBRARY_PATH, ...;
- every resource limit (a `ulimit -v` stops CUDA from starting, a `ulimit -n` from opening its libraries);
- the user and groups (the /dev/nvidia* device files' permissions) and those device files themselves;
- the NVIDIA driver version;
- the interpreter, what Python runs at start-up (.pth files, sitecustomize), PYTHONPATH's folders, and the size
  and time of torch's own libraries, the CUDA libraries pip installed next to it, each kernel's extension files,
  and the CUDA driver libraries in LD_LIBRARY_PATH folders;
- the Python packages an import pulls in: the requirement closure of torch (and numpy, which torch loads when
  present) and of each kernel, by their installed metadata (dist-info folder and RECORD) and where their module is
  found first (a copy that shadows another is a new answer).
The answer is kept in parts: torch's (keyed on everything above but the kernels) and one per kernel (torch's key
plus its own files and requirements), so installing or replacing one kernel, the way build-kernels does, asks the
worker again about that kernel only; an unrelated package installed beside torch changes nothing it imports.
Checking all of these costs a few hundred stat calls and a few metadata files (a few milliseconds), against
seconds for the worker.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import resource
import sys
from collections.abc import Iterable
from importlib.machinery import PathFinder
from importlib.util import find_spec
from pathlib import Path

from olmo_common.bounded.files import read_text

ENV_PREFIXES = ("CUDA", "NCCL_", "PYTORCH", "TORCH", "TRITON_", "LD_", "NVIDIA_", "CUBLAS", "CUDNN", "CUFILE",
                "XFORMERS", "FLASH_ATTENTION", "OMP_", "MKL_", "KMP_", "GOMP_", "PYTHON", "NVTE_", "UCX_",
                "GLOO_", "HIP_", "ROCM_", "HSA_", "MALLOC_", "GLIBC_")
ENV_NAMES = ("PATH", "HOME", "TMPDIR", "TEMP", "TMP", "USER", "LOGNAME", "VIRTUAL_ENV", "CONDA_PREFIX")


def environment() -> list[str]:
    """NAME=value for every variable the answer may depend on, sorted."""
    return sorted(f"{k}={v}" for k, v in os.environ.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES))


def limits() -> list[str]:
    """Every resource limit this platform has (soft and hard), by name."""
    out = []
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        try:
            out.append(f"{name}={resource.getrlimit(getattr(resource, name))}")
        except (ValueError, OSError):
            continue
    return out


def _read(path: str) -> str:
    try:
        return read_text(path, "system file", errors="replace")[:4096]
    except OSError:
        return ""


def driver() -> list[str]:
    """The loaded NVIDIA kernel module's version and the device files a process opens."""
    out = [_read("/proc/driver/nvidia/version"), _read("/sys/module/nvidia/version")]
    for dev in sorted(glob.glob("/dev/nvidia*")):
        try:
            st = os.stat(dev)
            out.append(f"{dev}:{st.st_mode}:{st.st_uid}:{st.st_gid}:{st.st_rdev}")
        except OSError:
            out.append(f"{dev}:gone")
    return out


def identity() -> list[str]:
    try:
        groups = sorted(os.getgroups())
    except OSError:
        groups = []
    return [f"uid={os.getuid()}", f"gid={os.getgid()}", f"groups={groups}"]


def stamp(path: str | Path) -> str:
    """path:size:mtime (nanoseconds), or path:absent."""
    try:
        st = os.stat(path)
        return f"{path}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return f"{path}:absent"


def _libraries(folder: Path) -> list[str]:
    return sorted(glob.glob(str(folder / "*.so*")))


def torch_files(torch_dir: Path) -> list[str]:
    """torch's own version file and libraries, and the nvidia-* CUDA libraries pip put next to it."""
    paths = [str(torch_dir / "version.py"), *_libraries(torch_dir), *_libraries(torch_dir / "lib")]
    paths += sorted(glob.glob(str(torch_dir.parent / "nvidia" / "*" / "lib" / "*.so*")))
    paths += sorted(glob.glob(str(torch_dir.parent / "triton" / "_C" / "*.so*")))
    return [stamp(p) for p in paths]


def _dist_libraries(dist: str) -> list[str]:
    """The compiled files a distribution installed, from the RECORD of its first dist-info on sys.path (read
    directly: importlib.metadata costs ~20 ms to import, a large share of a warm `check`)."""
    info = _dist_info(dist)
    if info is None:
        return []
    return sorted(str(info.parent / p) for p in _record_paths(info / "RECORD")
                  if p.endswith((".so", ".pyd")) or ".so." in p)


def _record_paths(record: Path) -> list[str]:
    """The paths a RECORD lists (its first column; the last two are the hash and the size)."""
    try:
        lines = read_text(record, "package metadata", errors="replace").splitlines()
    except OSError:
        return []
    return [line.rsplit(",", 2)[0].strip('"') for line in lines if line.count(",") >= 2]


def _module_file(name: str | None) -> str:
    """name->the stamp of the file it imports from (the copy first on the path), or name->none."""
    spec = find_spec(name) if name else None  # top-level names only: a dotted one imports its parent
    origin = spec.origin if spec and spec.origin else None
    return f"{name}->{stamp(origin) if origin else 'none'}"


def kernel_files(kernels: Iterable[str], dists: dict[str, str], extension_of: dict[str, str]) -> list[str]:
    """Each kernel's extension modules (the copy first on the path: a stale .so shadowing a fresh install is a
    new answer) and every compiled file its distribution installed."""
    out = []
    for key in kernels:
        out += [_module_file(name) for name in (key, extension_of.get(key))]
        if key in dists:
            out += [stamp(p) for p in _dist_libraries(dists[key])]
    return out


def loader_paths() -> list[str]:
    """Folders the dynamic loader searches before the system's (LD_LIBRARY_PATH), their times, and the CUDA
    driver libraries in them: a stub libcuda.so dropped there changes the answer. Also the loader's cache and the
    libraries LD_PRELOAD names."""
    out = [stamp("/etc/ld.so.cache")]
    # the libraries LD_PRELOAD names (spaces or colons between them): one installed or removed later is a new answer
    out += [stamp(p) for p in re.split(r"[\s:]+", os.environ.get("LD_PRELOAD", "")) if p]
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if folder:
            out.append(stamp(folder))
            out += [stamp(p) for p in sorted(glob.glob(os.path.join(folder, "libcuda*.so*")))]
            out += [stamp(p) for p in sorted(glob.glob(os.path.join(folder, "libnvidia*.so*")))]
    return out


def _site_folders() -> list[str]:
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]


def _pth_files() -> list[str]:
    """The .pth files of the site folders, each folder's sorted."""
    return [p for folder in _site_folders() for p in sorted(glob.glob(os.path.join(glob.escape(folder), "*.pth")))]


def python_paths() -> list[str]:
    """The interpreter, what it runs at start-up in every process (.pth files of the site folders, sitecustomize,
    usercustomize), PYTHONPATH's folders (their time changes when a module is added there: a shadow) and .egg
    entries. (Not the site folders' own times: every install changes them, including one that touches nothing
    torch imports; what torch and the kernels import is keyed by `requirements`.)"""
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    out = [sys.executable, sys.version, stamp(sys.executable)]
    out += [stamp(p) for p in dict.fromkeys([p for p in sys.path if p.endswith(".egg")] + extra)]
    out += [stamp(p) for p in _pth_files()]
    out += [_module_stamp(name) for name in ("sitecustomize", "usercustomize")]
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_infos() -> dict[str, Path]:
    """Normalized distribution name -> its first `<name>-<version>.dist-info` folder on sys.path (what an import
    sees): one listing of each folder."""
    found: dict[str, Path] = {}
    for folder in sys.path:
        try:
            entries = sorted(os.listdir(folder or "."))
        except OSError:
            continue
        for e in entries:
            if e.endswith(".dist-info"):
                found.setdefault(_norm(e[: -len(".dist-info")].rsplit("-", 1)[0]), Path(folder or ".", e))
    return found


def _dist_info(dist: str) -> Path | None:
    return _dist_infos().get(_norm(dist))


_REQUIRES = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)([^\n]*)$", re.M)


def _requires(info: Path) -> list[str]:
    """The distributions a dist-info's METADATA requires (not those of extras)."""
    try:
        text = read_text(info / "METADATA", "package metadata", errors="replace")
    except OSError:
        return []
    head = text.split("\n\n", 1)[0]  # the headers; the description after them is not metadata
    return [m.group(1) for m in _REQUIRES.finditer(head) if "extra" not in m.group(2)]


def _top_level(info: Path, dist: str) -> list[str]:
    """The modules a distribution provides: its top_level.txt, else its own name as a module."""
    try:
        names = read_text(info / "top_level.txt", "package metadata", errors="replace").split()
    except OSError:
        names = []
    return [n for n in names if n.isidentifier()] or [_norm(dist)]


def _module_stamp(name: str) -> str:
    """Where a top-level module is found first on sys.path, with that file's size and time."""
    try:  # sys.path itself, not sys.modules: a module this process imported long ago says nothing of now
        spec = PathFinder.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None and spec.origin else None
    return f"{name}->{stamp(origin) if origin and origin != 'built-in' else origin or 'none'}"


MAX_CLOSURE = 96  # distributions followed through Requires-Dist (torch's closure is about 15)


def requirements(roots: Iterable[str]) -> list[str]:
    """For `roots` and every distribution they require, transitively: its dist-info's RECORD (a reinstall or an
    upgrade changes it) and where each of its modules is found first."""
    out: list[str] = []
    seen: set[str] = set()
    queue = [r for r in roots]
    infos = _dist_infos()
    while queue and len(seen) < MAX_CLOSURE:
        dist = queue.pop(0)
        if _norm(dist) in seen:
            continue
        seen.add(_norm(dist))
        info = infos.get(_norm(dist))
        if info is None:
            out.append(f"{_norm(dist)}:absent")
            continue
        out.append(stamp(info / "RECORD"))
        out += [_module_stamp(m) for m in _top_level(info, dist)]
        queue += _requires(info)
    return out


def torch_key(torch_dir: Path) -> str:
    """The key of the torch part of the worker's answer: everything above but the kernels."""
    parts = [str(torch_dir), *environment(), *limits(), *driver(), *identity(), *python_paths(),
             *torch_files(torch_dir), *requirements(["torch", "numpy"]), *loader_paths()]
    return _digest(parts)


def kernel_key(torch_part: str, kernel: str, version: str | None, dist: str | None,
               extension_of: dict[str, str]) -> str:
    """The key of one kernel's part: torch's key, the kernel's installed version, its extension files and the
    requirement closure of its distribution."""
    dists = {kernel: dist} if dist else {}
    parts = [torch_part, kernel, str(version), *kernel_files([kernel], dists, extension_of),
             *(requirements([dist]) if dist else [])]
    return _digest(parts)


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\0".join(parts).encode(errors="surrogateescape")).hexdigest()[:16]
