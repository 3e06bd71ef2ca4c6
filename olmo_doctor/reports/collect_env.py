"""Parse `python -m torch.utils.collect_env` output, every layout torch printed from 0.4 to today, and the
"## Environment" bullet list of torch's issue template, however it was pasted (see reports/paste.py).

Labels changed over time ("Is CUDA available: Yes" became "True", "Libc version", "Python platform", the
"CPU:" lscpu block and "Is XNNPACK available" were added, "GPU models and configuration" moved to the next
lines for several GPUs), so fields are found by label, in any order, with or without a colon. Only what the
report states becomes a fact; everything else stays out of the result, which the caller reads as unknown.
"""

from __future__ import annotations

import re

from olmo_doctor import tables
from olmo_doctor.facts import Facts
from olmo_doctor.reports import packages, paste

# field -> every label spelling it had (lower case). Template labels carry a "(e.g., 1.0)" hint, ignored below.
LABELS: dict[str, tuple[str, ...]] = {
    # the one-word forms ("PyTorch: 2.4.0", "GPU: A100") are how people write an environment by hand; a one-word
    # label counts only with its colon (see _label)
    "torch": ("pytorch version", "torch version", "pytorch", "torch"),
    "debug": ("is debug build",),
    "cuda_build": ("cuda used to build pytorch",),
    "rocm_build": ("rocm used to build pytorch",),
    "os": ("os",),
    "gcc": ("gcc version",),
    "clang": ("clang version",),
    "cmake": ("cmake version",),
    "libc": ("libc version",),
    "python": ("python version", "python"),
    "platform": ("python platform",),
    "cuda_available": ("is cuda available",),
    "cuda_runtime": ("cuda runtime version",),
    "module_loading": ("cuda_module_loading set to",),
    # "GPU type" is how `transformers-cli env` and `accelerate env` name it
    "gpus": ("gpu models and configuration", "gpu", "gpus", "gpu model", "gpu models", "gpu type"),
    "driver": ("nvidia driver version", "driver version", "nvidia driver", "driver"),
    "cudnn": ("cudnn version",),
    "xpu": ("is xpu available",),
    "hip": ("hip runtime version",),
    "miopen": ("miopen runtime version",),
    "xnnpack": ("is xnnpack available",),
    "allocator": ("caching allocator config",),
    "cpu": ("cpu",),
    "libraries": ("versions of relevant libraries",),
    "template_cuda": ("cuda/cudnn version", "cuda", "cuda version"),  # which CUDA is meant is unclear: read as none
    "template_install": ("how you installed pytorch", "build command you used", "any other relevant information"),
}
_FIELD_OF = {label: field for field, labels in LABELS.items() for label in labels}
_LABEL = re.compile(
    r"^[ \t]*(?:[-*+•][ \t]+)?(?:\*\*|__)?(?P<label>" + "|".join(re.escape(lb) for lb in sorted(_FIELD_OF, key=len,
                                                                                               reverse=True))
    + r")(?:\*\*|__)?[ \t]*(?:\([^)]*\))?[ \t]*(?:\*\*|__)?(?P<sep>[:=|]|[ \t]+|$)[ \t]*(?P<value>.*)$", re.I)
# What collect_env prints for a value it could not get.
UNKNOWN = {"", "n/a", "na", "none", "could not collect", "no cuda", "unknown", "-", "?", "not available"}
_NON_NVIDIA = re.compile(r"^(?:amd|radeon|intel|apple)\b|\bgfx\d", re.I)


def _label(line: str) -> tuple[str, str] | None:
    m = _LABEL.match(line)
    if not m:
        return None
    label = m.group("label").lower()
    sep = m.group("sep")
    # a label without a colon must be at least two words ("PyTorch version 1.5.0"; "OS Ubuntu" is too loose)
    if sep.strip() == "" and " " not in label:
        return None
    if label == "cpu" and (sep.strip() != ":" or m.group("value").strip()):
        return None  # only the "CPU:" heading of the lscpu block, not "CPU: 4 cores" prose
    return _FIELD_OF[label], _clean(m.group("value"))


def _clean(value: str) -> str:
    return value.strip().strip("`*|").strip()


def _one_line_list(line: str) -> list[str]:
    """'Torch: 2.5.1 | CUDA: 12.4 | GPU: RTX 4090' written on one line: each piece that is a labelled field alone."""
    pieces = re.split(r"\s+[|;]\s+", line) if " | " in line or " ; " in line else [line]
    return pieces if len(pieces) > 1 and all(_label(p) for p in pieces) else [line]


def fields(lines: list[str]) -> dict[str, tuple[str, list[str]]]:
    """field -> (value on the label's line, the lines that continue it), first occurrence of each label."""
    out: dict[str, tuple[str, list[str]]] = {}
    current: list[str] | None = None
    for line in (piece for ln in lines for piece in _one_line_list(ln)):
        hit = _label(line)
        if hit:
            field, value = hit
            current = None
            if field not in out:
                out[field] = (value, [])
                current = out[field][1]
        elif not line.strip():
            current = None
        elif current is not None:
            current.append(line.strip())
    return out


def first_report(lines: list[str]) -> list[str]:
    """The lines of the first report when several were pasted back to back (one per node, before and after an
    upgrade): mixing them would judge a machine that does not exist. A second one starts at a second
    "PyTorch version" label or "Collecting environment information" line after the first report's fields."""
    seen_torch = seen_other = False
    for i, line in enumerate(lines):
        hit = _label(line)
        starts = (hit is not None and hit[0] == "torch") or line.strip().lower().startswith("collecting environment")
        if starts and seen_torch and seen_other:
            return lines[:i]
        if hit is not None:
            seen_torch = seen_torch or hit[0] == "torch"
            seen_other = seen_other or hit[0] != "torch"
    return lines


def report_count(text: str) -> int:
    """How many collect_env reports a paste holds (see first_report)."""
    lines, count = paste.unwrap(text), 0
    while lines and count < 64:
        first = first_report(lines)
        count += 1
        lines = lines[len(first):]
    return count


def looks_like(text: str) -> bool:
    lines = paste.unwrap(text)
    found = set(fields(lines))
    if len(found - {"cpu", "libraries", "template_install", "os"}) >= 2 or {"torch", "os"} <= set(found):
        return True
    # only the "Versions of relevant libraries" part was pasted: its tagged package lines name torch
    pkgs = packages.listed(lines)
    return bool(found) and ("torch" in pkgs or "pytorch" in pkgs)


def _known(value: str) -> str | None:
    return None if value.strip().lower() in UNKNOWN else value.strip()


def _version(value: str | None) -> str | None:
    m = re.match(r"v?(\d+(?:\.\d+)+[\w.+\-]*|\d+)", value or "")
    return m.group(1) if m else None


def _driver(value: str | None) -> str | None:
    """NVIDIA's driver version; Windows' own form (Device Manager, WMI) 31.0.15.3699 is driver 536.99."""
    if m := re.match(r"\d{2}\.\d+\.(\d+)\.(\d{4})$", value or ""):
        digits = (m.group(1) + m.group(2))[-5:]
        return f"{int(digits[:3])}.{digits[3:]}"
    v = _version(value)
    return v if v is not None and "." in v else None


def _major_minor(value: str | None) -> str | None:
    m = re.match(r"(\d+)\.(\d+)", value or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def parse(text: str) -> Facts:
    lines = first_report(paste.unwrap(text))
    found = fields(lines)
    f: Facts = {}

    def value(field: str) -> str | None:
        return _known(found[field][0]) if field in found else None

    _torch(found, f)
    if (avail := value("cuda_available")) is not None and avail.lower() in ("yes", "true", "no", "false"):
        f["torch.cuda_available"] = avail.lower() in ("yes", "true")
    if (os_line := value("os")) is not None:
        m = re.match(r"(.*?)\s*\((x86_64|amd64|aarch64|arm64|ppc64le|s390x|i[36]86|armv\w+)\)$", os_line, re.I)
        f["os.name"] = m.group(1) if m else os_line
        if m:
            f["os.arch"] = m.group(2)
    if (gcc := value("gcc")) is not None:
        m = re.search(r"(\d+\.\d+\.\d+)\s*$", gcc) or re.search(r"(\d+\.\d+(?:\.\d+)?)", gcc)
        if m:
            f["gcc.version"] = m.group(1)
    if (m := re.search(r"glibc-?(\d+\.\d+)", value("libc") or value("platform") or "")) is not None:
        f["glibc.version"] = m.group(1)
    if (py := _version(value("python"))) is not None:
        f["python.version"] = py
    if (plat := value("platform")) is not None:
        m = re.match(r"Linux-(.+?)-(x86_64|aarch64|ppc64le|s390x)", plat)
        if m:
            f["os.kernel"] = m.group(1)
        f["os.wsl"] = bool(re.search(r"microsoft|wsl", plat, re.I))
    if (rt := _version(value("cuda_runtime"))) is not None and "." in rt:
        # despite its label, collect_env reports the nvcc on PATH here
        f["nvcc.version"], f["nvcc.full_version"] = _major_minor(rt), rt
    if (drv := _driver(value("driver"))) is not None:
        f["driver.version"] = drv
    _smi_header(lines, f)
    _gpus(found, f)
    raw = {k: found[k][0].strip().lower() for k in ("gpus", "driver") if k in found}
    no_cuda = raw == {"gpus": "no cuda", "driver": "no cuda"} and f.get("torch.cuda_available") is False
    if "gpu.count" not in f and no_cuda:
        # collect_env prints "No CUDA" only when `nvidia-smi -L` found nothing and torch sees no GPU either
        f["gpu.count"] = 0
    system = f"{value('os') or ''} {value('platform') or ''}".strip()
    if "gpu.count" not in f and re.match(r"(?:macOS|Mac OS ?X|Darwin)\b", system, re.I):
        f["gpu.count"] = 0  # CUDA left macOS with 10.2: a Mac has no NVIDIA GPU that torch or a kernel build can use
    _cudnn(found, f)
    _cpus(lines, f)
    packages.read(lines, f)
    return f


def _torch(found: dict[str, tuple[str, list[str]]], f: Facts) -> None:
    if "torch" in found:
        raw = found["torch"][0].strip()
        if raw.lower() in ("n/a", "none", "not installed"):
            f["torch.version"] = None  # collect_env prints N/A when torch does not import
        elif (v := _version(raw)) is not None:
            f["torch.version"] = v
    if "cuda_build" in found and f.get("torch.version"):
        cuda = _major_minor(found["cuda_build"][0])
        if cuda is not None:
            f["torch.cuda"] = cuda
        elif _known(found["cuda_build"][0]) is None:
            # torch.version.cuda is None: a CPU (or ROCm) build of torch; that is a stated absence, not unknown
            f["torch.cuda"] = None
    if "rocm_build" in found and _version(_known(found["rocm_build"][0])):
        f["torch.cuda"] = None


def _smi_header(lines: list[str], f: Facts) -> None:
    """`nvidia-smi` pasted alongside: its header names the driver and the CUDA version it supports."""
    for line in lines:
        if m := re.search(r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)", line):
            f.setdefault("driver.version", m.group(1))
            if c := re.search(r"CUDA Version:\s*(\d+\.\d+)", line):
                f["driver.cuda_version"] = c.group(1)
            return


_BULLET = re.compile(r"^[-*+•][ \t]+")


def _is_gpu_name(entry: str) -> bool:
    return bool(tables.gpu_name_to_cc(entry) or tables.gpu_name_to_cc(expand_shorthand(entry)))


def _gpus(found: dict[str, tuple[str, list[str]]], f: Facts) -> None:
    if "gpus" not in found:
        return
    first, rest = found["gpus"]
    names: list[str] = []
    # "GPU:" alone, then one bare name per line (Lightning's environment report lists each GPU so)
    one_per_line = not first.strip() and sum(_is_gpu_name(_BULLET.sub("", e.strip())) for e in rest) > 1
    for entry in [first, *rest]:
        entry = re.sub(r"\s*\(UUID:[^)]*\)", "", entry).strip()
        # a markdown list keeps its bullets and bold on the GPU lines too ("- **GPU 1**: NVIDIA A100")
        entry = re.sub(r"\*\*|__|`", "", re.sub(r"^[-*+•][ \t]+", "", entry)).strip()
        if m := re.match(r"GPU\s*\d+\s*(?::\s*|\s+)(.+)$", entry):
            names.append(m.group(1).strip())
        elif one_per_line:
            names += [entry] if _is_gpu_name(entry) else []
        elif not names and _known(entry) and not re.match(r"MIG\b", entry):
            # one device name (macOS, ROCm, or the issue template's "2x RTX 3090" / "A100 x 8")
            # the "x" of a count stands apart from the name ("RTX 4090" is one GPU, not "RT" x 4090)
            # which side holds the count follows from which form matched, not from which part is digits
            # ("3090 x 2" is two RTX 3090s, not 3090 GPUs named "2")
            lead = re.match(r"(\d{1,3})\s*(?:x|×|\*)\s+(.+)$|(\d{1,3})(?:x|×|\*)(\D.*)$", entry, re.I)
            tail = re.match(r"(.+?)\s+(?:x|×|\*)\s*(\d{1,3})$|(.+?)\s*(?:×|\*)\s*(\d{1,3})$", entry, re.I)
            if lead:
                count, name = [g for g in lead.groups() if g is not None]
            elif tail:
                name, count = [g for g in tail.groups() if g is not None]
            else:
                count, name = "1", entry
            names += [name.strip()] * int(count)
            break
    names = [re.sub(r"\s+", " ", n) for n in names]
    if not names or any(_NON_NVIDIA.search(n) for n in names):
        return  # no listing, or not NVIDIA GPUs: the NVIDIA GPU facts stay unknown
    f["gpu.count"] = len(names)
    for i, name in enumerate(names):
        f[f"gpu.{i}.name"] = name


def expand_shorthand(name: str) -> str:
    """A GPU name as people type it in an issue ("RTX3090", "2080ti", "A6000") spelled as NVIDIA names it, for the
    compute-capability lookup only; the name itself is kept as written."""
    name = re.sub(r"\b(RTX|GTX|GTS|GT|MX)(?=\d)", r"\1 ", name.strip(), flags=re.I)
    if m := re.match(r"(\d{2})(\d0)(?=\s*(?:ti|super)?\b)", name, re.I):
        series = "GTX" if m.group(1) in ("10", "16") else "RTX" if m.group(1) in ("20", "30", "40", "50") else ""
        name = f"{series} {name}".strip()
    return re.sub(r"^(A[2-6]000)\b", r"RTX \1", name, flags=re.I)


def _cudnn(found: dict[str, tuple[str, list[str]]], f: Facts) -> None:
    if "cudnn" not in found:
        return
    first, rest = found["cudnn"]
    window = "\n".join([first, *rest])
    m = (re.search(r"libcudnn\.so\.(\d+\.\d+\.\d+)", window) or re.search(r"libcudnn\.(\d+\.\d+\.\d+)\.dylib", window)
         or re.search(r"cudnn\w*64_(\d+)\.dll", window) or re.match(r"\s*v?(\d+(?:\.\d+){0,2})\s*$", first))
    if m:
        f["cudnn.version"] = m.group(1)


def _cpus(lines: list[str], f: Facts) -> None:
    for line in lines:
        # lscpu's total; "On-line CPU(s) list" and "NUMA node0 CPU(s)" are other lines
        if m := re.match(r"\s*CPU\(s\)\s*:\s*(-?\d+)\s*$", line):
            f["cpu.count"] = int(m.group(1))
            return
