"""Parse `python -m torch.utils.collect_env` output, every layout torch printed from 0.4 to today, and the
"## Environment" bullet list of torch's issue template, however it was pasted (see reports/paste.py).

Labels changed over time ("Is CUDA available: Yes" became "True", "Libc version", "Python platform", the
"CPU:" lscpu block and "Is XNNPACK available" were added, "GPU models and configuration" moved to the next
lines for several GPUs), so fields are found by label, in any order, with or without a colon. Only what the
report states becomes a fact; everything else stays out of the result, which the caller reads as unknown.
"""

from __future__ import annotations

import re
from functools import lru_cache

from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.facts import Facts
from olmo_doctor.reports import packages, paste
from olmo_doctor.reports.vocabulary import cudnn_version

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
    # LLaMA-Factory's env names one GPU type and how many: "GPU type: NVIDIA A100", "GPU number: 8"
    "gpu_count": ("gpu number", "gpu count", "number of gpus", "num gpus"),
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
# AMD, Intel and Apple GPUs by vendor or product family ("Sapphire Pulse RX 7900 XTX", "AMD Instinct MI210",
# "Intel Arc A770"): not NVIDIA GPUs, so the NVIDIA GPU facts stay unknown
_NON_NVIDIA = re.compile(r"\b(?:amd|radeon|intel|apple|instinct)\b|\bgfx\d|\brx\s?\d{3,4}\b|\bmi\d{2,3}|"
                         r"\barc\s?a\d{3}", re.I)


def _label(line: str) -> tuple[str, str] | None:
    # stripped first: on a long blank run the pattern's own leading blanks would retry every label at every blank
    m = _LABEL.match(line.lstrip(" \t"))
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
    return {k: (v, list(rest)) for k, (v, rest) in _fields(tuple(lines)).items()}


@lru_cache(maxsize=8)  # looks_like, is_output and parse ask about the same report's lines
def _fields(lines: tuple[str, ...]) -> dict[str, tuple[str, tuple[str, ...]]]:
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
    return {k: (v, tuple(rest)) for k, (v, rest) in out.items()}


def first_report(lines: list[str]) -> list[str]:
    """The lines of the first report when several were pasted back to back (one per node, before and after an
    upgrade): mixing them would judge a machine that does not exist. A second one starts at a second
    "PyTorch version" label or "Collecting environment information" line after the first report's fields."""
    seen: set[bool] = set()  # whether a label seen so far was the torch one
    for i, line in enumerate(lines):
        hit = _label(line)
        if _starts_report(line, hit) and seen == {True, False}:
            return lines[:i]
        if hit is not None:
            seen.add(hit[0] == "torch")
    return lines


def _starts_report(line: str, hit: tuple[str, str] | None) -> bool:
    """A "PyTorch version" label or a "Collecting environment information" line."""
    return (hit is not None and hit[0] == "torch") or line.strip().lower().startswith("collecting environment")


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


# labels only collect_env itself prints (a hand-written "PyTorch: 2.4" or the issue template has none of them)
_OWN_FIELDS = {"debug", "cuda_build", "rocm_build", "cuda_available", "cuda_runtime", "module_loading", "libc",
               "platform", "xnnpack", "hip", "miopen", "cudnn"}


def is_output(text: str) -> bool:
    """Is this collect_env's own output (not a few hand-written labels)? Then its fields say exactly what they
    are, and they win over anything else the paste states."""
    lines = paste.unwrap(text)
    return any(ln.strip().lower().startswith("collecting environment") for ln in lines) or len(
        _OWN_FIELDS & set(fields(lines))) >= 2


def _known(value: str) -> str | None:
    return None if value.strip().lower() in UNKNOWN else value.strip()


# after a value, another one offered beside it: "3.10/3.11", "12.1 or 12.4", "2.4 - 2.5" is a choice, not a version
_ALTERNATIVE = re.compile(r"\s{0,2}(?:/|\bor\b|\||~|\bto\b|-\s)\s{0,2}v?\d{1,4}\.\d")


def _version(value: str | None) -> str | None:
    m = re.match(r"v?(\d+(?:\.\d+)+[\w.+\-]*|\d+)", value or "")
    if m is None or _ALTERNATIVE.match(value or "", m.end()):
        return None
    return m.group(1)


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


Found = dict[str, tuple[str, list[str]]]


def _value(found: Found, field: str) -> str | None:
    return _known(found[field][0]) if field in found else None


def _os(found: Found, f: Facts) -> None:
    if (avail := _value(found, "cuda_available")) is not None and avail.lower() in ("yes", "true", "no", "false"):
        f["torch.cuda_available"] = avail.lower() in ("yes", "true")
    if (os_line := _value(found, "os")) is not None:
        m = re.match(r"(.*?)\s*\((x86_64|amd64|aarch64|arm64|ppc64le|s390x|i[36]86|armv\w+)\)$", os_line, re.I)
        f["os.name"] = m.group(1) if m else os_line
        if m:
            f["os.arch"] = m.group(2)


def _compiler_and_python(found: Found, f: Facts) -> None:
    if (gcc := _value(found, "gcc")) is not None:
        m = re.search(r"(\d+\.\d+\.\d+)\s*$", gcc) or re.search(r"(\d+\.\d+(?:\.\d+)?)", gcc)
        if m:
            f["gcc.version"] = m.group(1)
    libc = _value(found, "libc") or _value(found, "platform") or ""
    if (m := re.search(r"glibc-?(\d+\.\d+)", libc)) is not None:
        f["glibc.version"] = m.group(1)
    if (py := _version(_value(found, "python"))) is not None:
        f["python.version"] = py


def _platform(found: Found, f: Facts) -> None:
    if (plat := _value(found, "platform")) is not None:
        m = re.match(r"Linux-(.+?)-(x86_64|aarch64|ppc64le|s390x)", plat)
        if m:
            f["os.kernel"] = m.group(1)
            f.setdefault("os.arch", m.group(2))  # the OS line may be cut off a paste; the platform names it too
        f["os.wsl"] = bool(re.search(r"microsoft|wsl", plat, re.I))


def _nvcc_and_driver(found: Found, f: Facts) -> None:
    if (rt := _version(_value(found, "cuda_runtime"))) is not None and "." in rt:
        # despite its label, collect_env reports the nvcc on PATH here
        f["nvcc.version"], f["nvcc.full_version"] = _major_minor(rt), rt
    if (drv := _driver(_value(found, "driver"))) is not None:
        if re.fullmatch(r"1[0-3]\.\d", drv):  # "driver: 12.8": driver versions have three-digit majors, so this is
            f["driver.cuda_version"] = drv  # the newest CUDA the driver runs, as nvidia-smi's header prints it
        else:
            f["driver.version"] = drv


def _no_gpu(found: Found, f: Facts) -> None:
    """gpu.count 0 where the report says so: "No CUDA" twice, or a Mac."""
    if "gpu.count" in f:
        return
    if _says_no_cuda(found, f) or _is_a_mac(found):
        f["gpu.count"] = 0


def _says_no_cuda(found: Found, f: Facts) -> bool:
    """collect_env prints "No CUDA" only when `nvidia-smi -L` found nothing and torch sees no GPU either."""
    raw = {k: found[k][0].strip().lower() for k in ("gpus", "driver") if k in found}
    return raw == {"gpus": "no cuda", "driver": "no cuda"} and f.get("torch.cuda_available") is False


def _is_a_mac(found: Found) -> bool:
    """CUDA left macOS with 10.2: a Mac has no NVIDIA GPU that torch or a kernel build can use."""
    system = f"{_value(found, 'os') or ''} {_value(found, 'platform') or ''}".strip()
    return re.match(r"(?:macOS|Mac OS ?X|Darwin)\b", system, re.I) is not None


def _without_module_compiler(lines: list[str]) -> list[str]:
    """/proc/driver/nvidia/version's "GCC version:" line (below its NVRM line) names the compiler that built the
    kernel module, not this machine's, and a table row comparing builds side by side names no one machine's
    value: both blanked, so no label reads them."""
    return ["" if (i and "NVRM version" in lines[i - 1] and line.lstrip().lower().startswith("gcc version:"))
            or paste.side_by_side(line) else line for i, line in enumerate(lines)]


def parse(text: str) -> Facts:
    lines = _without_module_compiler(first_report(paste.unwrap(text)))
    found = fields(lines)
    f: Facts = {}
    for read in (_torch, _os, _compiler_and_python, _platform, _nvcc_and_driver):
        read(found, f)
    _smi_header(lines, f)
    _gpus(found, f)
    _no_gpu(found, f)
    _cudnn(found, f)
    _cpus(lines, f)
    packages.read(lines, f)
    return f


def _torch_version(raw: str, f: Facts) -> None:
    if raw.strip().lower() in ("n/a", "none", "not installed"):
        f["torch.version"] = None  # collect_env prints N/A when torch does not import
    elif (v := _version(raw.strip())) is not None:
        f["torch.version"] = v


def _torch_cuda(raw: str, f: Facts) -> None:
    cuda = _major_minor(raw)
    if cuda is not None:
        f["torch.cuda"] = cuda
    elif _known(raw) is None:
        # torch.version.cuda is None: a CPU (or ROCm) build of torch; that is a stated absence, not unknown
        f["torch.cuda"] = None


def _torch(found: Found, f: Facts) -> None:
    if "torch" in found:
        _torch_version(found["torch"][0], f)
    if "cuda_build" in found and f.get("torch.version"):
        _torch_cuda(found["cuda_build"][0], f)
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
    return bool(name_to_cc(entry) or name_to_cc(expand_shorthand(entry)))


def _counted(entry: str) -> list[str]:
    """One device name, with a count (macOS, ROCm, or the issue template's "2x RTX 3090" / "A100 x 8").

    The "x" of a count stands apart from the name ("RTX 4090" is one GPU, not "RT" x 4090); which side holds the
    count follows from which form matched, not from which part is digits ("3090 x 2" is two RTX 3090s, not 3090
    GPUs named "2")."""
    lead = re.match(r"(\d{1,3})\s*(?:x|×|\*)\s+(.+)$|(\d{1,3})(?:x|×|\*)(\D.*)$", entry, re.I)
    tail = re.match(r"(.+?)\s+(?:x|×|\*)\s*(\d{1,3})$|(.+?)\s*(?:×|\*)\s*(\d{1,3})$", entry, re.I)
    if lead:
        count, name = [g for g in lead.groups() if g is not None]
    elif tail:
        name, count = [g for g in tail.groups() if g is not None]
    else:
        count, name = "1", entry
    return [name.strip()] * int(count)


def _clean_entry(entry: str) -> str:
    entry = re.sub(r"\s*\(UUID:[^)]*\)", "", entry).strip()
    # a markdown list keeps its bullets and bold on the GPU lines too ("- **GPU 1**: NVIDIA A100")
    return re.sub(r"\*\*|__|`", "", re.sub(r"^[-*+•][ \t]+", "", entry)).strip()


def _bare_names(rest: list[str]) -> int:
    """How many of the field's following lines are a GPU name alone (after a bullet)."""
    return sum(_is_gpu_name(_BULLET.sub("", e.strip())) for e in rest)


def _gpu_names(first: str, rest: list[str]) -> list[str]:
    """The GPU names of a "GPU models and configuration" field: "GPU 0: name" lines, one bare name per line, or
    one name with a count."""
    names: list[str] = []
    # "GPU:" alone, then one bare name per line (Lightning's environment report lists each GPU so)
    one_per_line = not first.strip() and _bare_names(rest) > 1
    for entry in map(_clean_entry, [first, *rest]):
        if m := re.match(r"GPU\s*\d+\s*(?::\s*|\s+)(.+)$", entry):
            names.append(m.group(1).strip())
        elif one_per_line:
            names += [entry] if _is_gpu_name(entry) else []
        elif not names and _known(entry) and not re.match(r"MIG\b", entry):
            return _counted(entry)
    return names


_MAX_PER_MACHINE = 16
_DEVICE_LINE = re.compile(r"GPU\s*\d+\s*:")


def _gpus(found: Found, f: Facts) -> None:
    if "gpus" not in found:
        return
    # a name has letters or is a model number ("4090"): "gpu: 1" in a job's resources asks for one GPU, names none;
    # collect_env's own "GPU 0: NAME" lines name a device whatever the name is
    first, rest = found["gpus"]
    if first.strip().lower() in ("none", "n/a", "[]"):  # Lightning's "GPU: None": torch saw none; names nothing
        return
    listed = any(_DEVICE_LINE.match(_clean_entry(e)) for e in [first, *rest])
    names = [re.sub(r"\s+", " ", n) for n in _gpu_names(first, rest)
             if listed or re.search(r"[A-Za-z]", n) or _is_gpu_name(n)]
    if not names or any(_NON_NVIDIA.search(n) for n in names):
        return  # no listing, or not NVIDIA GPUs: the NVIDIA GPU facts stay unknown
    said = _value(found, "gpu_count")
    if len(names) == 1 and said and said.isdigit() and 1 <= int(said) <= _MAX_PER_MACHINE:
        names = names * int(said)  # one type, and how many of it
    f["gpu.count"] = len(names)
    for i, name in enumerate(names):
        f[f"gpu.{i}.name"] = name


def expand_shorthand(name: str) -> str:
    """A GPU name as people type it in an issue ("RTX3090", "2080ti", "A6000") spelled as NVIDIA names it, for the
    compute-capability lookup only; the name itself is kept as written."""
    name = re.sub(r"\b(RTX|GTX|GTS|GT|MX)(?=\d)", r"\1 ", name.strip(), flags=re.I)
    if m := re.match(r"(\d{2})(\d0)(?=\s*(?:ti|super|d)?\b)", name, re.I):
        series = "GTX" if m.group(1) in ("10", "16") else "RTX" if m.group(1) in ("20", "30", "40", "50") else ""
        name = f"{series} {name}".strip()
    return re.sub(r"^(A[2-6]000)\b", r"RTX \1", name, flags=re.I)


def _cudnn(found: Found, f: Facts) -> None:
    if "cudnn" not in found:
        return
    first, rest = found["cudnn"]
    window = "\n".join([first, *rest])
    m = (re.search(r"libcudnn\.so\.(\d+\.\d+\.\d+)", window) or re.search(r"libcudnn\.(\d+\.\d+\.\d+)\.dylib", window)
         or re.search(r"cudnn\w*64_(\d+)\.dll", window))
    if m:
        f["cudnn.version"] = m.group(1)
    elif m := re.match(r"\s*v?(\d{4,5}|\d+(?:\.\d+){0,2})\s*$", first):
        f["cudnn.version"] = cudnn_version(m.group(1))  # torch's integer form: 8500 is 8.5.0


def _cpus(lines: list[str], f: Facts) -> None:
    for line in lines:
        # lscpu's total; "On-line CPU(s) list" and "NUMA node0 CPU(s)" are other lines
        if m := re.match(r"\s*CPU\(s\)\s*:\s*(-?\d+)\s*$", line):
            f["cpu.count"] = int(m.group(1))
            return
