"""Facts for build-kernels: from `olmo_doctor.api.gather_facts` when the project has it, else a small bridge.

The bridge runs the existing probes plus the few torch/Python facts a build plan needs, and reads a
`python -m torch.utils.collect_env` capture (with the sibling `env.txt` of a fixture folder, if present, for
memory) so `--from-report` works before the shared report loader lands. Delete the bridge once api exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

from olmo_doctor import tables
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, merge

GB = 1e9


def gather(from_report: str | None = None) -> Facts:
    """Facts of this machine, or of the machine a report describes."""
    try:
        api = importlib.import_module("olmo_doctor.api")
    except ImportError:
        api = None
    if api is not None and hasattr(api, "gather_facts"):
        facts: Facts = api.gather_facts(from_report=from_report)
        # build-only facts the shared probes may not gather; theirs win where both know a key
        return facts if from_report else merge(_build_extras(), facts)
    return _report_facts(Path(from_report)) if from_report else _local_facts()


def _build_extras() -> Facts:
    import shutil

    return {
        "python.version": platform.python_version(),
        "python.executable": sys.executable,
        "ninja.path": shutil.which("ninja"),
        "ccache.path": shutil.which("ccache"),
    }


def torch_facts(python: str = sys.executable) -> Facts:
    """torch's version, CUDA and C++11 ABI for the interpreter that will run the build.

    For this interpreter they are read from torch/version.py without importing torch (an import costs ~5 s,
    which would dominate a cached reinstall); torch >= 2.7 Linux wheels all use the C++11 ABI (pytorch PR
    #156896). Other interpreters and older torch are asked in a subprocess.
    """
    fast = _torch_version_file() if python == sys.executable else None
    if fast is not None:
        return fast
    code = (
        "import json, torch; print(json.dumps({'torch.version': torch.__version__,"
        " 'torch.cuda': torch.version.cuda, 'torch.cxx11abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return {"torch.version": None, "torch.import_error": str(e)}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["torch import failed"])[-1]
        return {"torch.version": None, "torch.import_error": last}
    parsed: Facts = json.loads(out.stdout.strip().splitlines()[-1])
    return parsed


def _torch_version_file() -> Facts | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin or not sys.platform.startswith("linux"):
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.MULTILINE)
    cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*(?:'([^']+)'|None)", text, re.MULTILINE)
    mm = tables.major_minor(version.group(1)) if version else None
    if not version or not cuda or mm is None or mm < (2, 7):
        return None
    return {"torch.version": version.group(1), "torch.cuda": cuda.group(1), "torch.cxx11abi": True}


def _local_facts() -> Facts:

    from olmo_doctor.probes import compiler, cuda, gpu, system
    from olmo_doctor.run import run

    return merge(
        gpu.probe(run),
        cuda.probe(run),
        compiler.probe(run),
        system.probe(),
        torch_facts(),
        _build_extras(),
    )


def _line(text: str, label: str) -> str | None:
    m = re.search(rf"^{re.escape(label)}:\s*(.+?)\s*$", text, re.MULTILINE)
    return m.group(1) if m else None


def _report_facts(path: Path) -> Facts:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise UsageError(f"cannot read report {path}: {e.strerror}") from e
    if "PyTorch version:" not in text:
        raise UsageError(f"{path} is not a `python -m torch.utils.collect_env` report")
    facts: Facts = {"gpu.source": "report"}
    torch_v = _line(text, "PyTorch version")
    facts["torch.version"] = torch_v
    cuda_v = _line(text, "CUDA used to build PyTorch")
    facts["torch.cuda"] = None if cuda_v in (None, "None", "N/A", "Could not collect") else cuda_v
    rt = _line(text, "CUDA runtime version")  # collect_env reports `nvcc --version` here
    m = re.match(r"(\d+)\.(\d+)", rt or "")
    facts["nvcc.version"] = f"{m.group(1)}.{m.group(2)}" if m else None
    py = re.search(r"^Python version:\s*(\d+\.\d+\.\d+)", text, re.MULTILINE)
    facts["python.version"] = py.group(1) if py else None
    gpus = re.findall(r"GPU (\d+): (.+)", _section(text, "GPU models and configuration"))
    facts["gpu.count"] = len(gpus)
    for idx, name in gpus:
        facts[f"gpu.{idx}.name"] = name.strip()
        facts[f"gpu.{idx}.compute_capability"] = tables.gpu_name_to_cc(name)
    cpus = _line(text, "CPU(s)")
    facts["cpu.count"] = int(cpus) if cpus and cpus.isdigit() else None
    facts["os.arch"] = (re.search(r"\((x86_64|aarch64)\)", _line(text, "OS") or "") or [None, None])[1]
    facts.update(_sibling_env(path.parent / "env.txt"))
    try:  # a fixture's torch.txt (env_capture.sh) records the C++11 ABI collect_env leaves out
        abi = re.search(r"^cxx11abi (True|False)$", (path.parent / "torch.txt").read_text(), re.MULTILINE)
        if abi:
            facts["torch.cxx11abi"] = abi.group(1) == "True"
    except OSError:
        pass
    return facts


def _section(text: str, label: str) -> str:
    """The value of a collect_env field, including GPU lines that continue on the following lines."""
    m = re.search(rf"^{re.escape(label)}:(.*(?:\n(?!\w[\w ]*:).*)*)", text, re.MULTILINE)
    return m.group(1) if m else ""


def _sibling_env(env: Path) -> Facts:
    """Memory, CUDA_HOME and compilers from a fixture's env.txt (shared/bench/env_capture.sh output)."""
    try:
        text = env.read_text(errors="replace")
    except OSError:
        return {}
    out: Facts = {}
    for key, label in (("mem.available_gb", "MemAvailable"), ("mem.total_gb", "MemTotal")):
        m = re.search(rf"^{label}:\s+(\d+) kB", text, re.MULTILINE)
        if m:
            out[key] = round(int(m.group(1)) * 1024 / GB, 1)
    for key, var in (
        ("cuda.home", "CUDA_HOME"),
        ("gcc.cc_env", "CC"),
        ("gcc.cxx_env", "CXX"),
        ("env.TORCH_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST"),
    ):
        m = re.search(rf"^{var}=(\S+)$", text, re.MULTILINE)
        if m:
            out[key] = m.group(1)
    if out.get("gcc.cxx_env"):
        out["gcc.path"] = out["gcc.cxx_env"]
    if out.get("cuda.home"):
        out["cuda.home_has_headers"] = True  # the captured machine built flash-attn with it
    ninja = re.search(r"^== ninja\n(\S+)", text, re.MULTILINE)
    out["ninja.path"] = ninja.group(1) if ninja else None
    return out
