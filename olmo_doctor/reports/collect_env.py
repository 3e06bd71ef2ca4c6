"""Parse `python -m torch.utils.collect_env` output (as printed, pasted into an issue, or quoted with '> ')."""

from __future__ import annotations

import re

from olmo_doctor import tables
from olmo_doctor.facts import Facts

KEYS = ("PyTorch version:", "CUDA used to build PyTorch:", "Python version:", "Nvidia driver version:",
        "GPU models and configuration:", "Libc version:", "Is CUDA available:")
UNKNOWN = {"", "N/A", "None", "Could not collect", "No CUDA"}


def clean_lines(text: str) -> list[str]:
    lines = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = re.sub(r"^\s*>\s?", "", raw)  # markdown quote
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        if line.strip().startswith("```"):
            continue
        lines.append(line.rstrip())
    return lines


def looks_like(text: str) -> bool:
    return sum(k in text for k in KEYS) >= 2


def _value(lines: list[str], key: str) -> str | None:
    for line in lines:
        if line.startswith(key):
            value = line[len(key):].strip()
            return None if value in UNKNOWN else value
    return None


def parse(text: str) -> Facts:
    lines = clean_lines(text)
    f: Facts = {}
    torch_version = _value(lines, "PyTorch version:")
    f["torch.version"] = torch_version
    f["torch.cuda"] = _value(lines, "CUDA used to build PyTorch:")
    avail = _value(lines, "Is CUDA available:")
    f["torch.cuda_available"] = None if avail is None else avail.lower() == "true"
    if (os_line := _value(lines, "OS:")) is not None:
        m = re.match(r"(.*?)\s*\((\w+)\)$", os_line)
        f["os.name"], f["os.arch"] = (m.group(1), m.group(2)) if m else (os_line, None)
    if (gcc := _value(lines, "GCC version:")) is not None:
        m = re.search(r"(\d+\.\d+\.\d+)\s*$", gcc) or re.search(r"(\d+\.\d+(?:\.\d+)?)", gcc)
        f["gcc.version"] = m.group(1) if m else None
    if (libc := _value(lines, "Libc version:")) is not None:
        m = re.search(r"glibc-([\d.]+)", libc)
        f["glibc.version"] = m.group(1) if m else None
    if (py := _value(lines, "Python version:")) is not None:
        m = re.match(r"([\d.]+)", py)
        f["python.version"] = m.group(1) if m else None
    if (plat := _value(lines, "Python platform:")) is not None:
        m = re.match(r"Linux-(.+?)-(x86_64|aarch64)", plat)
        f["os.kernel"] = m.group(1) if m else None
        f["os.wsl"] = "microsoft" in plat.lower()
    if (rt := _value(lines, "CUDA runtime version:")) is not None:
        # despite its label, collect_env reports the nvcc on PATH here
        mm = tables.major_minor(rt)
        f["nvcc.version"] = f"{mm[0]}.{mm[1]}" if mm else None
        f["nvcc.full_version"] = rt
    f["driver.version"] = _value(lines, "Nvidia driver version:")
    _gpus(lines, f)
    _cudnn(lines, f)
    _cpus(lines, f)
    _packages(lines, f)
    return f


def _gpus(lines: list[str], f: Facts) -> None:
    names: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("GPU models and configuration:"):
            first = line.split(":", 1)[1].strip()
            block = [first] + [ln.strip() for ln in lines[i + 1 : i + 65] if re.match(r"\s*GPU \d+:", ln)]
            for entry in block:
                m = re.match(r"GPU \d+:\s*(.+?)(?:\s*\(UUID.*)?$", entry)
                if m:
                    names.append(m.group(1).strip())
                elif entry and entry not in ("Could not collect", "N/A") and not names:
                    names.append(entry)
            break
    else:
        return
    f["gpu.count"] = len(names)
    for i, name in enumerate(names):
        f[f"gpu.{i}.name"] = name


def _cudnn(lines: list[str], f: Facts) -> None:
    for i, line in enumerate(lines):
        if line.startswith("cuDNN version:"):
            window = " ".join([line, *lines[i + 1:i + 12]])
            m = re.search(r"libcudnn\.so\.(\d+\.\d+\.\d+)", window) or re.search(r"cuDNN version:\s*([\d.]+)", window)
            f["cudnn.version"] = m.group(1) if m else None
            return


def _cpus(lines: list[str], f: Facts) -> None:
    for line in lines:
        m = re.match(r"CPU\(s\):\s+(\d+)$", line)
        if m:
            f["cpu.count"] = int(m.group(1))
            return


def _packages(lines: list[str], f: Facts) -> None:
    pkgs: dict[str, str] = {}
    for line in lines:
        m = re.match(r"\[(?:pip3?|conda)\]\s+([A-Za-z0-9_.\-]+)\s*(?:==|\s)\s*([^\s]+)", line)
        if m:
            pkgs.setdefault(m.group(1).lower().replace("_", "-"), m.group(2))
    if "flash-attn" in pkgs:
        f["flash_attn.version"] = pkgs["flash-attn"]
    if "xformers" in pkgs:
        f["xformers.version"] = pkgs["xformers"]
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        if name in pkgs:
            f["torch.nccl"] = pkgs[name]
            break
    for name in ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"):
        if name in pkgs:
            mm = re.match(r"(\d+\.\d+\.\d+)", pkgs[name])
            f["torch.cudnn"] = mm.group(1) if mm else pkgs[name]
            break
    if any(line.startswith("[conda]") and "Could not collect" not in line for line in lines):
        f["os.conda_env"] = "conda"
