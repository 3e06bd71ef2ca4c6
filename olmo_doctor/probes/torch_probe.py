"""torch, flash-attn, xformers and torchao facts without importing torch in this process.

The version and CUDA release come from `torch/version.py` (read as text), the packages' versions from their
dist-info. What only an imported torch can say (C++ ABI, arch list, cuDNN, NCCL, CUDA availability, whether the
kernel extensions and torchao.float8 load against it) comes from one short subprocess, cached in the user cache
keyed by the install paths' mtimes, the packages' versions and the driver version, so the second `check` costs
nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from olmo_doctor.facts import Facts
from olmo_doctor.probes import dists
from olmo_doctor.resources import read_cache, user_cache_dir, write_cache

WORKER = r"""
import json, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
out = {}
def first_line(e):
    return (type(e).__name__ + ": " + str(e)).strip().splitlines()[0][:400]
try:
    import torch
except Exception as e:
    print(json.dumps({"torch.import_error": first_line(e)})); sys.exit(0)
out["torch.cxx11abi"] = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False))
try:
    out["torch.arch_list"] = list(torch.cuda.get_arch_list())
except Exception:
    out["torch.arch_list"] = []
v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
if v:
    parts = (v // 10000, v % 10000 // 100, v % 100) if v >= 90000 else (v // 1000, v % 1000 // 100, v % 100)
    out["torch.cudnn"] = "%d.%d.%d" % parts
try:
    out["torch.nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version()) if torch.version.cuda else None
except Exception:
    out["torch.nccl"] = None
out["torch.cuda_available"] = bool(torch.cuda.is_available())
def emit():
    print(json.dumps(out), flush=True)
emit()
for mod, key in (("flash_attn_2_cuda", "flash_attn"), ("flash_attn_interface", "flash_attn_3"),
                 ("xformers.ops", "xformers"), ("torchao.float8", "torchao")):
    if not sys.argv[1:] or key not in sys.argv[1:]:
        continue
    try:
        m = __import__(mod, fromlist=["_"])
        if key == "torchao":
            gone = [n for n in ("Float8LinearConfig", "convert_to_float8_training") if not hasattr(m, n)]
            if gone:
                raise ImportError("torchao.float8 has no " + ", ".join(gone))
        out[key + ".import_ok"] = True
        if key == "xformers":
            import xformers
            ok = getattr(xformers, "_has_cpp_library", None)
            out["xformers.has_cpp_library"] = bool(ok) if ok is not None else None
    except Exception as e:
        out[key + ".import_ok"] = False
        out[key + ".import_error"] = first_line(e)
    emit()
"""
# WORKER drops the working directory that `python -c` puts first on sys.path: it imports what the installed
# commands import, never a torch/ or torchao/ folder of whatever checkout `check` runs in. It prints its facts so
# far after torch and after each import: an import that kills the interpreter (a torchao whose C++ kernels were
# built for another torch aborts it with "Fatal Python error: Aborted") loses only its own answer, which
# dynamic_facts then records as a failed import.

# dist, key, in WORKER's order. torchao is not an attention kernel: `precision: fp8` multiplies through its
# torchao.float8 (olmo/nn/float8.py), and like the kernels it is checked by importing it next to this torch.
KERNELS = (("flash-attn", "flash_attn"), ("flash_attn_3", "flash_attn_3"), ("xformers", "xformers"),
           ("torchao", "torchao"))
EXTENSION_OF = {"flash_attn": "flash_attn_2_cuda", "flash_attn_3": "flash_attn_interface"}  # what WORKER imports
VERSION_FIELD = re.compile(r"^(__version__|cuda|hip)\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]*)['\"]?", re.M)



def static_facts() -> tuple[Facts, Path | None]:
    """Facts read from files only: torch version/CUDA and the kernel packages' versions."""
    facts: Facts = {"torch.version": None, "torch.cuda": None, "torch.path": None}
    spec = find_spec("torch")
    torch_dir = Path(spec.origin).parent if spec and spec.origin else None
    if torch_dir is not None:
        facts["torch.path"] = str(torch_dir)
        try:
            fields = dict(VERSION_FIELD.findall((torch_dir / "version.py").read_text()))
            facts["torch.version"] = fields.get("__version__") or None
            cuda = fields.get("cuda")
            facts["torch.cuda"] = None if cuda in (None, "", "None") else cuda
        except OSError:
            pass
    for dist_name, key in KERNELS:
        facts[f"{key}.version"] = dists.version(dist_name)
    return facts, torch_dir


def _mtime(path: Path | None) -> float:
    try:
        return path.stat().st_mtime if path else 0.0
    except OSError:
        return 0.0


def _cache_key(torch_dir: Path, kernels: list[str]) -> str:
    try:
        driver = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        driver = ""
    parts = [sys.executable, str(torch_dir), str(_mtime(torch_dir / "version.py")), driver,
             os.environ.get("CUDA_VISIBLE_DEVICES", ""), os.environ.get("PYTHONPATH", "")]
    # the extension modules the worker imports decide import_ok: a kernel rebuilt, or another copy earlier on the
    # path (a stale .so shadowing a fresh install), is a new answer, so their paths and mtimes are in the key
    for key in [*kernels, *(EXTENSION_OF.get(k, "") for k in kernels)]:
        spec = find_spec(key) if key else None  # top-level names only: a dotted one would import its parent here
        origin = spec.origin if spec and spec.origin else None
        parts += [key, str(origin), str(_mtime(Path(origin) if origin else None))]
    # file times alone can repeat across installs (an installer that links files from its cache, a restored
    # image), so the installed versions are in the key too, and torchao's switch to skip loading its C++ kernels
    dist_of = {key: dist for dist, key in KERNELS}
    parts += [f"{k}=={dists.version(dist_of[k])}" for k in kernels if k in dist_of]
    parts.append(os.environ.get("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", ""))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _last_facts(stdout: str) -> Facts | None:
    """The last line of WORKER's output that is a JSON object (an imported module may print lines of its own)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _killed_by(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _record_crash(facts: Facts, kernels: list[str], returncode: int) -> None:
    """The worker died inside the first import it has no answer for (it imports in KERNELS' order): that import
    killed the interpreter, so the package does not load here; the ones after it were never tried."""
    for _, key in KERNELS:
        if key in kernels and f"{key}.import_ok" not in facts:
            facts[f"{key}.import_ok"] = False
            facts[f"{key}.import_error"] = f"importing it killed the Python process ({_killed_by(returncode)})"
            return


def dynamic_facts(torch_dir: Path, kernels: list[str], timeout: float = 120.0) -> Facts:
    """Ask a torch-importing subprocess, or the cache of its last answer for this exact install."""
    cache = user_cache_dir() / "torch-facts" / f"{_cache_key(torch_dir, kernels)}.json"
    cached = read_cache(cache)
    if isinstance(cached, dict):
        return cached
    try:
        proc = subprocess.run([sys.executable, "-c", WORKER, *kernels], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"torch.import_error": "could not run a Python subprocess to import torch"}
    facts = _last_facts(proc.stdout)
    if facts is None:
        return {"torch.import_error": "could not run a Python subprocess to import torch"}
    if proc.returncode != 0 and "torch.import_error" not in facts:
        _record_crash(facts, kernels, proc.returncode)
    write_cache(cache, facts)
    return facts


def probe(import_torch: bool = True) -> Facts:
    facts, torch_dir = static_facts()
    if torch_dir is None or not import_torch:
        return facts
    kernels = [k for _, k in KERNELS if facts.get(f"{k}.version")]
    facts.update(dynamic_facts(torch_dir, kernels))
    return facts


def auto_pick(facts: Facts) -> Facts:
    """Which kernel package `attn_backend: auto` takes on this GPU and torch without timing: the one
    `build-kernels`' GPU check recorded as faster than SDPA (olmo_doctor.build.verify), else 'sdpa'; 'timed' when
    nothing was recorded for this GPU and torch (the trainer then times the backends at its first start)."""
    gpu, version = facts.get("gpu.0.name"), facts.get("torch.version")
    if not gpu or not version:
        return {"attention.auto_pick": None}
    from olmo_doctor.build.verify import recorded_backend

    return {"attention.auto_pick": recorded_backend(str(gpu), str(version)) or "timed"}
