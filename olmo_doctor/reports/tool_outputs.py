"""More tool outputs recognised by their own shape (signatures.py holds the one-line ones), each read as the tool
means its numbers:

- Unsloth's start-up banner: "Torch: 2.5.1+cu124. CUDA: 6.1. CUDA Toolkit: 12.4." prints the GPU's compute
  capability as "CUDA" and torch's own CUDA (`torch.version.cuda`) as "CUDA Toolkit", so in a paste holding that
  banner a "CUDA Toolkit" label is torch's CUDA, not nvcc's; its "FA [Xformers = 0.0.28.post3. FA2 = False]"
  names xformers (its "None" only says xformers did not import, so it is not read);
- `torch.__config__.show()` (collect_env's cousins in mmcv, lmdeploy and others embed it): its "NVCC architecture
  flags" are the kernels torch was built with, i.e. `torch.cuda.get_arch_list()`;
- CUDA failing to start, in torch's words ("Unexpected error from cudaGetDeviceCount() ... Error 802: system not
  yet initialized", as a warning or a RuntimeError) and in other runtimes' logs ("cudart init failure: 802",
  "cudaSetDevice err: 802", "cuInit err: 802"): one value per error number, so the forms agree;
- `nvidia-smi --query-gpu=...,compute_cap,... --format=csv`: a header naming the fields, then one row per GPU.
"""

from __future__ import annotations

import re

from olmo_doctor.reports.observe import Observation
from olmo_doctor.reports.vocabulary import VERSION

UNSLOTH = "unsloth.banner"  # a marker observation: this paste holds Unsloth's banner (freeform re-reads its labels)

_BANNER = re.compile(rf"\b(?:Py)?[Tt]orch\s?[:=]\s?(?P<torch>{VERSION})\.\s{{1,4}}CUDA\s?[:=]\s?\d{{1,2}}\.\d\.?"
                     rf"\s{{1,4}}CUDA Toolkit\s?[:=]\s?(?P<cuda>\d{{1,2}}\.\d{{1,2}})\b")
# "Xformers = None" says only that xformers did not import (it may be installed and failing): not read
_FA = re.compile(rf"\bFA \[Xformers\s?=\s?(?P<v>{VERSION})\.?\s{{1,4}}FA2\s?=\s?(?:True|False)\]")
# the label in the banner's vocabulary, wherever the paste repeats it ("- CUDA Toolkit: 12.1" in a bullet list)
TOOLKIT_LABEL = re.compile(r"\bCUDA Toolkit\s?[:=]\s?\d", re.I)

_NVCC_FLAGS = re.compile(r"NVCC architecture flags:\s?(?P<flags>[^\n]{1,2000})")
_CODE = re.compile(r"code=\[?(?P<codes>(?:(?:sm|compute)_\d{2,3}[af]?,?){1,4})\]?")

# torch's message, with the error number and CUDA's name for it
_TORCH_INIT = re.compile(r"Unexpected error from cudaGetDeviceCount\(\)[^\n]{0,300}?Error (?P<n>\d{1,4}):"
                         r" ?(?P<msg>[^\n(`\"']{1,80})")
_RUNTIME_INIT = re.compile(r"\b(?:cudart init failure|cuInit err|cudaSetDevice err|cudaGetDeviceCount err)"
                           r"\s?[:=]\s?(?P<n>\d{1,4})\b")
# CUDA's own names for the start-up errors people paste (cudaError_t, driver_types.h), so a form that prints only
# the number reads the same as torch's, which prints both
CUDA_ERRORS = {"2": "out of memory", "3": "initialization error",
               "35": "CUDA driver version is insufficient for CUDA runtime version",
               "100": "no CUDA-capable device is detected", "101": "invalid device ordinal",
               "304": "OS call failed or operation not supported on this OS", "802": "system not yet initialized",
               "803": "system has unsupported display driver / cuda driver combination",
               "804": "forward compatibility was attempted on non supported HW", "999": "unknown error"}

_QUERY_FIELDS = {"name": "name", "compute_cap": "compute_capability", "driver_version": "driver"}
MAX_ROWS = 256


def unsloth(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    for i, line in enumerate(lines):
        if "CUDA Toolkit" in line and (m := _BANNER.search(line)):
            obs += [Observation("torch.version", m.group("torch"), i, line),
                    Observation("torch.cuda", m.group("cuda"), i, line), Observation(UNSLOTH, True, i, line)]
            used.add(i)
        if "Xformers" in line and (m := _FA.search(line)):
            obs.append(Observation("xformers.version", m.group("v").rstrip("."), i, line))
            used.add(i)


def torch_build_flags(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """The SASS and PTX targets of "NVCC architecture flags: -gencode;arch=compute_90,code=sm_90;...", in order."""
    for i, line in enumerate(lines):
        if "NVCC architecture flags" not in line or not (m := _NVCC_FLAGS.search(line)):
            continue
        archs: list[str] = []
        for code in _CODE.finditer(m.group("flags")):
            archs += [a for a in code.group("codes").split(",") if a and a not in archs]
        if archs:
            obs.append(Observation("torch.arch_list", archs, i, line))
            used.add(i)


# torch's warning without an error number: "CUDA initialization: CUDA unknown error - this may be due to an
# incorrectly set up environment ... Setting the available devices to be zero."
_TORCH_INIT_WORDS = re.compile(r"CUDA initialization:\s{0,4}(?P<msg>[^\n(.]{1,120}?)(?:\s-\s|\.|\(|$)")


def cuda_start_errors(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    for i, line in enumerate(lines):
        m = _TORCH_INIT.search(line) if "cudaGetDeviceCount" in line else None
        if m is not None or "CUDA initialization" in line:  # torch's words: is_available() answers False
            obs.append(Observation("torch.cuda_available", False, i, line))
        if m is None and "CUDA initialization" in line and (w := _TORCH_INIT_WORDS.search(line)):
            obs.append(Observation("torch.cuda_init_error", f"CUDA initialization: {w.group('msg').strip()}", i, line))
            continue
        m = m or (_RUNTIME_INIT.search(line) if " err" in line or "failure" in line else None)
        if m is None:
            continue
        n = m.group("n")
        said = m.groupdict().get("msg")
        message = CUDA_ERRORS.get(n) or (said.strip().rstrip(".") if said else "")
        obs.append(Observation("torch.cuda_init_error", f"Error {n}: {message}" if message else f"Error {n}", i,
                               line))


def smi_query_csv(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """A header of nvidia-smi query fields ("name, compute_cap" or "compute_cap") and the rows below it."""
    for i, line in enumerate(lines):
        if "compute_cap" not in line:
            continue
        header = [f.strip().strip("`").split(" [")[0] for f in line.strip().strip("`").split(",")]
        if not header or any(f not in _QUERY_FIELDS and not f.startswith(("memory.", "index", "pci.")) for f in header):
            continue
        rows = []
        for j in range(i + 1, min(len(lines), i + 1 + MAX_ROWS)):
            cells = [c.strip().strip("`").strip() for c in lines[j].strip().split(",")]
            if len(cells) != len(header) or not all(cells):
                break
            rows.append((j, cells))
        if not rows or not all(re.fullmatch(r"\d{1,2}\.\d", cells[header.index("compute_cap")]) for _, cells in rows):
            continue
        used.update([i, *(j for j, _ in rows)])
        obs.append(Observation("gpu.count", len(rows), rows[0][0], lines[rows[0][0]]))
        for gpu, (j, cells) in enumerate(rows):
            for field, value in zip(header, cells, strict=True):
                if field in ("name", "compute_cap"):
                    obs.append(Observation(f"gpu.{gpu}.{_QUERY_FIELDS[field]}", value, j, lines[j]))
                elif field == "driver_version":
                    obs.append(Observation("driver.version", value, j, lines[j]))


# a version with a CUDA/ROCm/CPU build tag under a label that names no package ("Framework & Version:
# 2.6.0+cu124", "DL framework: 2.5.1+cu121", "Backend: 2.4.0+rocm6.1"): only torch's wheels are versioned 2.x with
# those tags and called a framework
_FRAMEWORK = re.compile(r"^\s{0,8}(?:[-*•]\s{1,4})?\**(?:(?:DL |Deep[- ]learning )?Framework(?:\s?(?:&|and)\s?"
                        r"Version| version)?|Backend)\**\s{0,4}[:：=]\s{0,4}`?"
                        r"(?P<v>2\.\d{1,2}\.\d{1,2}(?:\.dev\d{1,14})?\+(?:cu\d{3}|rocm\d[\d.]{0,8}|cpu))`?\s*$", re.I)


def framework_label(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    for i, line in enumerate(lines):
        if "+" in line and (m := _FRAMEWORK.match(line)):
            obs.append(Observation("torch.version", m.group("v"), i, line))
            used.add(i)


_SHOW_TORCH = re.compile(r"^\s{0,4}Name:\s{0,4}torch\s*$")
_SHOW_VERSION = re.compile(rf"^\s{{0,4}}Version:\s{{0,4}}(?P<v>{VERSION})\s*$")
_SHOW_REQUIRES = re.compile(r"^\s{0,4}Requires:\s{0,4}(?P<r>[^\n]{0,2000})$")
_CUDA_WHEEL = re.compile(r"\bnvidia-cuda-runtime-cu(?P<major>\d{2})\b")


def pip_show_torch(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """`pip show torch` of a PyPI wheel: a version without a local tag whose requirements are CUDA wheels
    (nvidia-cuda-runtime-cu12) is the PyPI build, whose CUDA the release fixes (compat.wheels: 2.2 -> 12.1)."""
    from olmo_doctor.compat.wheels import pypi_default_cuda

    for i, line in enumerate(lines):
        if not _SHOW_TORCH.match(line):
            continue
        block = lines[i + 1:i + 14]
        version = next((m.group("v") for ln in block if (m := _SHOW_VERSION.match(ln))), None)
        requires = next(((j, m.group("r")) for j, ln in enumerate(block, i + 1) if (m := _SHOW_REQUIRES.match(ln))),
                        None)
        if version is None or "+" in version or requires is None:
            continue
        cuda = pypi_default_cuda(version)
        wheel = _CUDA_WHEEL.search(requires[1])
        if cuda and wheel and cuda.split(".")[0] == wheel.group("major"):
            obs.append(Observation("torch.cuda", cuda, requires[0], lines[requires[0]]))


_NVRM = re.compile(r"NVRM version:\s{0,8}NVIDIA UNIX\s{1,4}(?:Open Kernel Module for\s{1,4}(?P<a>aarch64|x86_64|"
                   r"ppc64le)|(?P<b>aarch64|x86_64|ppc64le)\s{1,4}(?:Open\s)?Kernel Module)")
_MODULE_GCC = re.compile(r"^\s{0,8}GCC version:", re.I)


def proc_driver_version(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """`cat /proc/driver/nvidia/version`: its NVRM line names the machine's architecture (the driver's version there
    is signatures.py's), and the "GCC version:" line below it is the compiler that built the kernel module (NVIDIA's
    Buildroot on a Jetson, the distribution's on a DKMS host), not the compiler a build here would use."""
    for i, line in enumerate(lines):
        if "NVRM version" not in line:
            continue
        if m := _NVRM.search(line):
            obs.append(Observation("os.arch", m.group("a") or m.group("b"), i, line))
        for j in range(i + 1, min(i + 3, len(lines))):
            if _MODULE_GCC.match(lines[j]):
                used.add(j)


_LIGHTNING_CUDA = re.compile(r"^\s{0,8}\*\s{0,4}CUDA:\s*$")
_LIGHTNING_FIELD = re.compile(r"^\s{0,16}-\s{0,4}(?P<k>available|version):\s{1,40}"
                              r"(?P<v>True|False|None|\d{1,2}\.\d{1,2})\s*$")


def lightning_cuda(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """Lightning's environment report (`collect_env_details`): under "* CUDA:", "- available:" is
    torch.cuda.is_available() and "- version:" torch.version.cuda (None for a CPU build); the section ends at the
    next "* " heading."""
    for i, line in enumerate(lines):
        if not _LIGHTNING_CUDA.match(line):
            continue
        for j in range(i + 1, min(len(lines), i + 40)):
            if lines[j].lstrip().startswith("* "):
                break
            if m := _LIGHTNING_FIELD.match(lines[j]):
                value = m.group("v")
                if m.group("k") == "available" and value in ("True", "False"):
                    obs.append(Observation("torch.cuda_available", value == "True", j, lines[j]))
                elif m.group("k") == "version":
                    obs.append(Observation("torch.cuda", None if value == "None" else value, j, lines[j]))
                used.add(j)


# bitsandbytes' CUDA set-up log (0.3x-0.41): "CUDA SETUP: Highest compute capability among GPUs detected: 8.0"
_BNB_CC = re.compile(r"Highest compute capability among GPUs detected:\s{0,4}(?P<cc>\d{1,2}\.\d)\b")
# a driver's CUDA under the driver's own label ("Driver 13.0", "驱动 13.2", Ollama's "driver=13.2"): driver versions
# have three-digit majors since 2008, so a 1x.y there is the newest CUDA the driver runs, as nvidia-smi prints it
_DRIVER_CUDA = re.compile(r"(?:(?<![\w.-])(?:NVIDIA )?[Dd]river(?: version)?|驱动(?:版本)?)\s{0,4}[:=：]?\s{0,4}"
                          r"(?P<v>1[0-3]\.\d)(?![\d.]|\s?(?:GB|MB))")


def gpu_tool_lines(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    for i, line in enumerate(lines):
        if "compute capability among" in line and (m := _BNB_CC.search(line)):
            # the highest of the machine's GPUs: GPU 0's when it is the only one named
            obs.append(Observation("gpu.0.compute_capability", m.group("cc"), i, line))
            used.add(i)
        if ("river" in line or "驱动" in line) and (m := _DRIVER_CUDA.search(line)):
            obs.append(Observation("driver.cuda_version", m.group("v"), i, line))


# Stable Diffusion web UI's check: "This program is tested with 3.10.6 Python, but you have 3.13.5."
_YOU_HAVE_PYTHON = re.compile(r"\btested with (?:Python )?\d\.\d{1,2}(?:\.\d{1,2})?(?: Python)?,? but you have "
                              r"(?:Python )?(?P<v>3\.\d{1,2}(?:\.\d{1,2})?)\b")
# NVIDIA's driver installer by file name: "NVIDIA-Linux-x86_64-535.171.04.run"
_DRIVER_RUNFILE = re.compile(r"\bNVIDIA-Linux-(?:x86_64|aarch64|ppc64le)-(?P<v>\d{3}\.\d{1,3}(?:\.\d{1,3})?)\.run\b")
_UNAME_M = re.compile(r"\buname\s{1,4}-m\b")
_ARCH_LINE = re.compile(r"^\s{0,4}(?P<a>x86_64|aarch64|arm64|ppc64le)\s*$")


def stated_outputs(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    for i, line in enumerate(lines):
        if "but you have" in line and (m := _YOU_HAVE_PYTHON.search(line)):
            obs.append(Observation("python.version", m.group("v"), i, line))
            used.add(i)
        if "NVIDIA-Linux-" in line and (m := _DRIVER_RUNFILE.search(line)):
            obs.append(Observation("driver.version", m.group("v"), i, line))
        if "uname" in line and _UNAME_M.search(line):  # the command, then its bare answer on the next line
            for j in range(i + 1, min(i + 3, len(lines))):
                if m := _ARCH_LINE.match(lines[j]):
                    obs.append(Observation("os.arch", m.group("a"), j, lines[j]))
                    used.add(j)
                    break
