"""Parse raw tool captures: `env.txt` ("== section" blocks of nvidia-smi, nvcc, gcc, meminfo, ulimit, pip, env,
df ...) and `torch.txt` (torch's own answers: a `torch <version> cuda <v> cudnn <n>` line, nccl, arch list, devices).
A section that was captured states its facts, absences included (an unlisted package or variable is absent)."""

from __future__ import annotations

import ast
import re

from olmo_doctor.compat.versions import version_key
from olmo_doctor.facts import FACT_KEYS, Facts

GB = 1e9
_SIZE = {"K": 1e3 / GB * 1.024, "M": 1.048576e6 / GB, "G": 1.073741824, "T": 1099.511627776}


def looks_like(text: str) -> bool:
    return bool(re.search(r"^== (nvidia-smi|meminfo|nvcc|gcc|ldd|pip|env)\s*$", text, re.M)) or bool(
        re.search(r"^torch \S+ cuda \S+ cudnn", text, re.M))


def sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        m = re.match(r"^== (.+?)\s*$", line)
        if m:
            current = m.group(1)
            out[current] = []
        else:
            out.setdefault(current, []).append(line)
    return out


def _df_size(lines: list[str], column: int) -> float | None:
    for line in lines[1:]:
        cols = line.split()
        if len(cols) > column:
            m = re.match(r"([\d.]+)([KMGT])?", cols[column])
            if m:
                return round(float(m.group(1)) * _SIZE.get(m.group(2) or "G", 1.0), 1)
    return None


Sections = dict[str, list[str]]


def _joined(s: Sections, name: str) -> str:
    return "\n".join(s.get(name, []))


def _limit(value: str, unit: int = 1) -> int:
    return -1 if value == "unlimited" else int(value) * unit


def _cpu_and_memory(s: Sections, f: Facts) -> None:
    if (lines := s.get("nproc")) and re.fullmatch(r"-?\d+", lines[0].strip()):
        f["cpu.count"] = int(lines[0].strip())
    mem = {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+) kB", _joined(s, "meminfo"), re.M)}
    if "MemTotal" in mem:
        f["mem.total_gb"] = round(mem["MemTotal"] * 1024 / GB, 1)
    if "MemAvailable" in mem:
        f["mem.available_gb"] = round(mem["MemAvailable"] * 1024 / GB, 1)


def _ulimits(s: Sections, f: Facts) -> None:
    ulimit = _joined(s, "ulimit")
    if m := re.search(r"open files\s+\(-n\)\s+(\S+)", ulimit):
        f["ulimit.nofile.soft"] = _limit(m.group(1))
    if m := re.search(r"max locked memory\s+\(kbytes, -l\)\s+(\S+)", ulimit):
        f["ulimit.memlock.soft"] = _limit(m.group(1), 1024)


def _nvcc(s: Sections, f: Facts) -> None:
    if m := re.search(r"release (\d+\.\d+), V([\d.]+)", _joined(s, "nvcc")):
        f["nvcc.version"], f["nvcc.full_version"] = m.group(1), m.group(2)
        first = s["nvcc"][0].strip() if s.get("nvcc") else ""
        f["nvcc.path"] = first if first.startswith("/") else None
    for line in s.get("CUDA_HOME", []):
        if line.startswith("CUDA_HOME="):
            f["cuda.home"] = f["cuda.home_env"] = line.split("=", 1)[1].strip() or None


def _compilers(s: Sections, f: Facts) -> None:
    """gcc, glibc and the newest GLIBCXX symbol version libstdc++ has."""
    if m := re.search(r"^(?:g\+\+|gcc) .*?(\d+\.\d+\.\d+)\s*$", _joined(s, "gcc"), re.M):
        f["gcc.version"] = m.group(1)
    if m := re.search(r"(?:GLIBC|GNU libc)[^\d]*(\d+\.\d+)\)?\s*(\d+\.\d+)?", _joined(s, "ldd")):
        f["glibc.version"] = m.group(2) or m.group(1)
    glibcxx = re.findall(r"GLIBCXX_(3\.4\.\d+)", _joined(s, "libstdc++"))
    if glibcxx:
        f["libstdcxx.glibcxx_max"] = max(glibcxx, key=version_key)


def _ninja_and_python(s: Sections, f: Facts) -> None:
    ninja = s.get("ninja", [])
    if "ninja" in s:  # the section was taken: no output means no ninja on PATH
        f["ninja.path"] = f["ninja.version"] = None
    if len(ninja) >= 2 and (m := re.match(r"(\d+(?:\.\d+)*)", ninja[1].strip())):
        f["ninja.path"], f["ninja.version"] = ninja[0].strip(), m.group(1)
    if m := re.search(r"Python (\d+\.\d+\.\d+)", _joined(s, "python")):
        f["python.version"] = m.group(1)


def _packages_and_env(s: Sections, f: Facts) -> None:
    if "pip" in s:
        _pip(s["pip"], f)
    if "env" in s:
        _env(s["env"], f)


def _disks_and_os(s: Sections, f: Facts) -> None:
    if (shm := _df_size(s.get("shm", []), 1)) is not None:
        f["shm.size_gb"] = shm
    if (disk := _df_size(s.get("disk", []), 3)) is not None:
        f["disk.free_gb"] = disk
    if m := re.search(r'^PRETTY_NAME="?([^"\n]+)', _joined(s, "os-release"), re.M):
        f["os.name"] = m.group(1)
    if (uname := s.get("uname")) and len(uname[0].split()) > 2:
        f["os.kernel"] = uname[0].split()[2]
        f["os.wsl"] = "microsoft" in uname[0].lower()


def parse(text: str) -> Facts:
    s = sections(text)
    f: Facts = {}
    # in this order: a later section refines an earlier one's facts (the torch lines last)
    for read in (_cpu_and_memory, _ulimits, _gpu, _nvcc, _compilers, _ninja_and_python, _packages_and_env,
                 _disks_and_os):
        read(s, f)
    _torch(text, f)
    return f


def _columns(lines: list[str]) -> list[str]:
    """The query's column names from its header row ("memory.total [MiB]" -> "memory.total")."""
    header = next((r for r in lines if r.startswith("name")), "")
    return [c.strip().split(" ")[0] for c in header.split(",")]


def _gpu_rows(s: Sections, f: Facts) -> None:
    """`nvidia-smi --query-gpu=... --format=csv`: a header row, then one row per GPU."""
    rows = [r for r in s.get("nvidia-smi query", []) if r.strip() and not r.startswith("name")]
    cols = _columns(s.get("nvidia-smi query", []))
    if not (rows and cols):
        return
    f["gpu.count"] = len(rows)
    for i, row in enumerate(rows):
        _gpu_row(f, i, dict(zip(cols, [v.strip() for v in row.split(",")], strict=False)))
    f["gpu.source"] = "report"


def _gpu_row(f: Facts, i: int, values: dict[str, str]) -> None:
    """GPU i's facts from its row, by column name."""
    f[f"gpu.{i}.name"] = values.get("name")
    f[f"gpu.{i}.compute_capability"] = values.get("compute_cap")
    if (mem := re.match(r"([\d.]+)", values.get("memory.total", ""))):
        f[f"gpu.{i}.memory_gb"] = round(float(mem.group(1)) * 1048576 / GB, 1)
    f[f"gpu.{i}.pci_bus_id"] = values.get("pci.bus_id")
    f["driver.version"] = values.get("driver_version") or f.get("driver.version")


def _gpu(s: Sections, f: Facts) -> None:
    _gpu_rows(s, f)
    smi = _joined(s, "nvidia-smi")
    if m := re.search(r"Driver Version:\s*([\d.]+)", smi):
        f["driver.version"] = m.group(1)
    if m := re.search(r"CUDA Version:\s*([\d.]+)", smi):
        f["driver.cuda_version"] = m.group(1)
    topo = _joined(s, "nvidia-smi topo")
    if topo and isinstance(f.get("gpu.count"), int):
        f["gpu.nvlink"] = bool(re.search(r"\bNV\d+\b", topo)) if f["gpu.count"] > 1 else False  # type: ignore[operator]


# `pip list` name -> the fact family of its version
_PIP_KEYS = {"setuptools": "setuptools", "wheel": "wheel", "packaging": "packaging", "flash-attn": "flash_attn",
             "xformers": "xformers", "torchao": "torchao"}
# environment variable -> the facts it sets besides env.<NAME>
_ENV_FACTS = {"CXX": ("gcc.cxx_env",), "CC": ("gcc.cc_env",), "CUDA_HOME": ("cuda.home", "cuda.home_env")}


def _pip(lines: list[str], f: Facts) -> None:
    # `pip list` names every installed distribution, so one it does not list is absent, not unknown
    for name in ("setuptools", "wheel", "packaging", "flash_attn", "xformers", "torchao"):
        f[f"{name}.version"] = None
    for line in lines:
        if m := re.match(r"pip (\S+) from", line):
            f["pip.version"] = m.group(1)
        cols = line.split()
        if len(cols) == 2 and re.match(r"\d", cols[1]):
            key = _PIP_KEYS.get(cols[0].lower().replace("_", "-"))
            if key:
                f[f"{key}.version"] = cols[1]


def _env(lines: list[str], f: Facts) -> None:
    # the whole environment was captured, so a variable it does not list is unset
    f.update({key: None for key in FACT_KEYS if key.startswith("env.")})
    f.setdefault("gcc.cc_env", None)
    f.setdefault("gcc.cxx_env", None)
    for line in lines:
        name, sep, value = line.partition("=")
        if not sep:
            continue
        if f"env.{name}" in FACT_KEYS:
            f[f"env.{name}"] = value
        f.update({key: value for key in _ENV_FACTS.get(name, ())})


def _cudnn(number: str) -> str:
    """torch.backends.cudnn.version()'s number as x.y.z: 90100 -> 9.1.0 (from cuDNN 9), 8902 -> 8.9.2."""
    v = int(number)
    return "%d.%d.%d" % ((v // 10000, v % 10000 // 100, v % 100) if v >= 90000
                         else (v // 1000, v % 1000 // 100, v % 100))


def _torch_devices(text: str, f: Facts) -> None:
    """`<index> <name> <major> <minor> <bytes> <count>` per device torch sees."""
    devices = re.findall(r"^(\d+) (.+?) (\d+) (\d+) (\d+) \d+$", text, re.M)
    if not (devices and re.search(r"^torch ", text, re.M)):
        return
    f["torch.cuda_available"] = True
    for idx, name, major, minor, mem in devices:
        f.setdefault(f"gpu.{idx}.name", name)
        f[f"gpu.{idx}.compute_capability"] = f"{major}.{minor}"
        f.setdefault(f"gpu.{idx}.memory_gb", round(int(mem) / GB, 1))
    f.setdefault("gpu.count", len(devices))


def _arch_list(raw: str, f: Facts) -> None:
    try:
        f["torch.arch_list"] = [str(a) for a in ast.literal_eval(raw)]
    except (ValueError, SyntaxError):
        pass


def _torch(text: str, f: Facts) -> None:
    if m := re.search(r"^torch (\S+) cuda (\S+) cudnn (\S+)", text, re.M):
        f["torch.version"] = m.group(1)
        f["torch.cuda"] = None if m.group(2) == "None" else m.group(2)
        if m.group(3).isdigit():
            f["torch.cudnn"] = _cudnn(m.group(3))
    if m := re.search(r"^nccl \((\d+), (\d+), (\d+)\)", text, re.M):
        f["torch.nccl"] = ".".join(m.groups())
    if m := re.search(r"^cxx11abi (True|False)", text, re.M):
        f["torch.cxx11abi"] = m.group(1) == "True"
    if m := re.search(r"^arch_list (\[.*\])", text, re.M):
        _arch_list(m.group(1), f)
    _torch_devices(text, f)
    if m := re.search(r"^CUDA_HOME (\S+)", text, re.M):
        f["cuda.home"] = m.group(1)
