"""Facts from a few hand-written lines rather than a whole report: `PyTorch version: 2.5.1+cu124`,
`torch 2.4.0+cu121, CUDA 12.1, driver 535.104, RTX 4090`, the `nvidia-smi` header or its GPU rows, `nvidia-smi -L`,
`torch.version.cuda: 12.1`, `gcc --version`'s first line, "cuDNN 9.1", "on WSL2", `flash-attn==2.7.4` lines.

People paste what they have at hand. Each value found here is a partial fact; what the text does not state stays
unknown, so rules that need it stay quiet. Only a value named next to what it is counts ("torch 2.4.0", "driver
535.104"); a bare "CUDA 12.1" says neither whose CUDA it is (torch's, the toolkit's, the driver's) and is left out,
as collect_env.py does. Values are handed to the collect_env parser as the lines it reads, so a GPU count or a
driver version means the same here as in a full report.

A paste often holds more than one machine or attempt ("torch 2.1 vs 2.4", "works on A100, fails on my 3090"), an
install command or a resolver error naming a version that is not installed, or a compiler list of what torch was
built with. A fact stated twice with different values stays unknown, and those lines are not read: a wrong fact
makes rules fire wrongly, a missing one only keeps them quiet.
"""

from __future__ import annotations

import itertools
import re

from olmo_doctor import tables
from olmo_doctor.facts import Facts
from olmo_doctor.reports import collect_env, packages, paste

# "torch 2.4.0+cu121", "PyTorch version: 2.5.1", "torch==2.3.1", "pytorch=2.2.0" (conda), "torch2.1"; not a path
# ("torch/nn", "python3.10/site-packages") and not another package ("torchvision 0.19", "pytorch3d")
# (not "CUDA used to build PyTorch: 12.1": that is torch's CUDA, read by _TORCH_CUDA)
_TORCH = re.compile(r"(?<![\w/.-])(?<!build )(?:py)?torch(?:\.__version__|\s+version)?\s{0,4}(?:==|=|:)?\s{0,4}"
                    r"['\"`]?v?(\d{1,2}\.\d{1,3}(?:\.\d{1,4})?(?:[.+-]?[A-Za-z][\w.+]{0,40})?)(?![\w.-]*/)", re.I)
# "torch.version.cuda: 12.1" (what people print to answer "which CUDA is your torch built for")
_TORCH_CUDA = re.compile(r"(?<![\w/.-])(?:torch\.version\.cuda|CUDA used to build PyTorch)\s{0,4}(?:==|=|:)?\s{0,4}"
                         r"['\"`]?(\d{1,2}\.\d{1,2})\b", re.I)
_CUDNN = re.compile(r"(?<![\w/.-])cudnn(?:\s+version)?\s{0,4}(?:=|:|\s)\s{0,4}v?(\d{1,2}(?:\.\d{1,2}){1,2})\b", re.I)
# "on WSL2", not a path ("/mnt/wsl2-data") and not a denial ("not WSL2", "no WSL2", "non-WSL2")
_WSL = re.compile(r"(?<![\w/.-])(?<!\bnot )(?<!\bno )(?<!\bnon-)(?<!\bnot on )(?<!\bnot in )WSL ?2(?![\w/.-])", re.I)
_PYTHON = re.compile(r"(?<![\w/.-])python(?:\s+version)?\s{0,4}(?:==|=|:)?\s{0,4}v?(\d\.\d{1,2}(?:\.\d{1,3})?)\b"
                     r"(?![\w.-]*/)", re.I)
_DRIVER = re.compile(r"(?<![\w/.-])(?:nvidia\s+)?driver(?:\s+version)?\s{0,4}(?:=|:|\s)\s{0,4}v?"
                     r"(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\b", re.I)
_SMI = re.compile(r"NVIDIA-SMI\s{1,40}(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\b")
_SMI_CUDA = re.compile(r"CUDA Version:\s{0,8}(\d{1,2}\.\d{1,2})\b")
# "nvcc 12.4", "Cuda compilation tools, release 12.4, V12.4.131": the toolkit, named as such
_NVCC = re.compile(r"(?<![\w/.-])nvcc(?:\s+version)?\s{0,4}(?:=|:|\s)\s{0,4}v?(\d{1,2}\.\d{1,2})\b"
                   r"|Cuda compilation tools, release (\d{1,2}\.\d{1,2})", re.I)
# "gcc 11.4", "g++ version: 13.2.0", `gcc --version`'s "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0"
# (not after "[": Python's banner names the compiler Python was built with, "[GCC 11.4.0] on linux")
_GCC = re.compile(r"(?<![\w/.\[-])(?:gcc|g\+\+)(?:\s+version)?\s{0,4}(?:=|:|\s)\s{0,4}"
                  r"(\d{1,2}\.\d{1,2}(?:\.\d{1,2})?)\b"
                  r"|(?<![\w/.\[-])(?:gcc|g\+\+) \([^)\n]{0,80}\) (\d{1,2}\.\d{1,2}(?:\.\d{1,2})?)\b", re.I)
# `nvidia-smi -L` and collect_env's own "GPU 0: NAME" lines
# (matched on the stripped line: no open-ended blank runs for a long near miss to backtrack through)
# (a name is words, digits, dots, dashes and slashes: "NVIDIA A100-SXM4-80GB", "NVIDIA RTX 6000 Ada Generation")
_GPU_LINE = re.compile(r"GPU\s?(\d{1,3}):\s{0,4}(\w[\w .\-/]{1,79}?)(?:\s{0,4}\(UUID:[^)]{0,100}\))?$", re.I)
# an nvidia-smi table row: "|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |"
_SMI_ROW = re.compile(r"^\|?\s{0,6}(\d{1,3})\s{1,6}((?:NVIDIA|Tesla|Quadro)\b[^|\n]{1,60}?)\s{1,40}(?:On|Off)\s{0,4}\|")
# a GPU named in prose, with an optional count: "RTX 4090", "2x RTX 3090", "8 x H100 80GB", "A100", "L40S"
# ("8 H100" counts too: "2 nodes x 8 H100" is eight per machine)
_GPU_WORD = re.compile(
    r"(?<![\w.-])(?:(\d{1,3})(?:\s?[x×*]\s?|\s))?((?:NVIDIA\s)?(?:GeForce\s)?(?:(?:RTX|GTX|Quadro|Tesla|TITAN)\s?[\w-]{1,12}"
    r"(?:\s(?:Ti|SUPER|Ada))?|[ABHLTV]\d{1,3}[SG]?(?:[- ](?:SXM\d?|PCIe|NVL))?|GH200|GB200|B200|B300)"
    r"(?:[\s-]?\d{2,3}\s?GB)?)"
    r"(?:\s?[x×*]\s?(\d{1,3}))?(?![\w.+-])", re.I)
# after a name, a class of GPUs rather than one ("A100+", "A100 or newer", "Ampere and later"): not this machine's
_GPU_CLASS = re.compile(r"\s?(?:or|and)\s(?:newer|later|above|better|up)\b", re.I)
# the most GPUs one machine holds (HGX-2 and its kind: 16); a larger count in prose describes a cluster
_MAX_PER_MACHINE = 16
# "8 GPUs", "4x GPUs": a count said apart from the name
_GPU_COUNT = re.compile(r"(?<![\w.-])(\d{1,3})\s?(?:[x×*]\s?)?GPUs?\b", re.I)
# Lines that name a version someone wants, not the one installed: an install command, pip's resolver refusing a
# version ("versions that require a different python version: 2.9.0"), a requirement, or the compiler list of
# `torch.__config__.show()` ("PyTorch built with: - GCC 9.3")
_NOT_INSTALLED = re.compile(r"\b(?:(?:pip3?|conda|mamba|micromamba|uv|poetry)\s+(?:pip\s+)?(?:install|add)|"
                            r"requirements?\b|\brequire[sd]?\b|satisf(?:y|ies)|no matching distribution|"
                            r"(?:upgrade|downgrade)d?\s+to)",
                            re.I)
_BULLET = re.compile(r"^[-*•]\s{0,4}")
_SHOW_NAME = re.compile(r"^Name:\s{0,4}([A-Za-z0-9][\w.-]{0,80})$")
_SHOW_VERSION = re.compile(r"^Version:\s{0,4}(\d[\w.+!-]{0,80})$")
_BUILT_WITH = re.compile(r"\bbuilt with:\s*$", re.I)
# a conda list row for torch with its wide columns: "pytorch    2.1.0    py3.10_cuda12.1_cudnn8.9.2_0    pytorch"
_CONDA_ROW = re.compile(r"^(?:py)?torch\s+\d\S{0,40}\s+(?:py|cuda|cpu)\S{0,80}(?:\s+\S{1,40})?$", re.I)


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    """The one value the text states, or None when it states none or two that disagree ("torch 2.1 vs torch
    2.4", "driver 535 fails, driver 550 works"): with two machines or two attempts in the text, either could be
    the one to judge, and a wrong fact makes rules fire wrongly. A shorter form of the same value agrees ("torch
    2.4" and "torch 2.4.0+cu121"), and the longest is kept."""
    values = {g for m in pattern.finditer(text) if (g := next((g for g in m.groups() if g), None))}
    longest = max(values, key=len, default=None)
    if longest is None or not all(_same(longest, v) for v in values):
        return None
    return longest


def _same(longer: str, shorter: str) -> bool:
    return longer.lower().startswith(shorter.lower()) and longer[len(shorter):len(shorter) + 1] in ("", ".", "+", "-")


def _stated(lines: list[str]) -> list[str]:
    """The lines that state what is installed: install commands, resolver errors and a build's compiler list
    name other versions."""
    out: list[str] = []
    in_built_with = False
    for line in lines:
        if _BUILT_WITH.search(line):
            in_built_with = True
            continue
        if in_built_with and line.lstrip().startswith("-"):
            continue
        in_built_with = False
        if not _NOT_INSTALLED.search(line):
            out.append(line)
    return out


def _gpus(lines: list[str], text: str) -> list[str]:
    """GPU names, one entry per GPU: listed lines first (nvidia-smi -L, the smi table), else names in prose."""
    listed = [m.group(2).strip() for ln in lines if (m := _GPU_LINE.match(ln.strip()) or _SMI_ROW.match(ln))]
    if listed:
        return listed
    # a list with one GPU name per line (Lightning's environment report: "- NVIDIA A100-SXM4-40GB" per GPU)
    items = [m.group(2) for ln in lines if (m := _GPU_WORD.fullmatch(_BULLET.sub("", ln.strip(), count=1)))]
    if len(items) > 1 and all(_cc(n) for n in items) and len(items) <= _MAX_PER_MACHINE:
        return items
    names: list[str] = []
    counts: set[int] = set()
    for m in _GPU_WORD.finditer(text):
        name = m.group(2).strip()
        if _GPU_CLASS.match(text, m.end()):
            continue
        if _cc(name):  # a real GPU name, not a word that looks like one ("T1000x", "A1")
            names.append(name)
            counts.update(int(c) for c in (m.group(1), m.group(3)) if c)
    if not names:
        return []
    keys = sorted({_gpu_key(n) for n in names}, key=len)
    if not all(keys[-1].startswith(k) for k in keys):  # "works on A100 but fails on my RTX 3090": which one?
        return []
    counts.update(int(m.group(1)) for m in _GPU_COUNT.finditer(text))
    if len(counts) > 1:  # "2x RTX 3090 ... 4 GPUs": the count is not clear, so neither is the list
        return []
    count = counts.pop() if counts else 1
    if not 1 <= count <= _MAX_PER_MACHINE:  # "512x H100" is a cluster, "0x" a typo: no machine's count
        return []
    return [max(names, key=len)] * count


def _gpu_key(name: str) -> str:
    return re.sub(r"\bnvidia\b|\bgeforce\b|\btesla\b|[\s-]", "", name.lower())


def _pip_show(lines: list[str]) -> list[str]:
    """`pip show torchao` blocks ("Name: torchao" then "Version: 0.7.0") as "torchao==0.7.0" lines."""
    out = []
    for line, after in itertools.pairwise(lines):
        if (name := _SHOW_NAME.match(line.strip())) and (version := _SHOW_VERSION.match(after.strip())):
            out.append(f"{name.group(1)}=={version.group(1)}")
    return out


def _cc(name: str) -> str | None:
    return tables.gpu_name_to_cc(name) or tables.gpu_name_to_cc(collect_env.expand_shorthand(name))


def parse(text: str) -> Facts:
    """The facts a few free-form lines state; {} when they state none."""
    lines = _stated(paste.unwrap(text))
    body = "\n".join(lines)
    found: list[str] = []  # the lines collect_env would have printed for these values
    if torch := _first(_TORCH, body):
        found.append(f"PyTorch version: {torch.rstrip('.')}")
    if python := _first(_PYTHON, body):
        found.append(f"Python version: {python}")
    if driver := _first(_SMI, body) or (None if _SMI.search(body) else _first(_DRIVER, body)):
        found.append(f"Nvidia driver version: {driver}")
    if nvcc := _first(_NVCC, body):
        found.append(f"CUDA runtime version: {nvcc}")  # collect_env's label for the nvcc on PATH
    if gcc := _first(_GCC, body):
        found.append(f"GCC version: {gcc}")
    if cudnn := _first(_CUDNN, body):
        found.append(f"cuDNN version: {cudnn}")
    gpus = _gpus(lines, body)
    if gpus:
        found.append("GPU models and configuration:")
        found += [f"GPU {i}: {name}" for i, name in enumerate(gpus)]
    facts = collect_env.parse("\n".join(found)) if found else {}
    # `flash-attn 2.7.4` / `xformers==0.0.28` lines, as below a collect_env report; a bare conda list row for
    # torch is read as collect_env's "[conda]" line, whose build string says the CUDA it was built for; a
    # `pip show` block's Name and Version as the pip line they mean
    listed = [f"[conda] {ln.strip()}" if _CONDA_ROW.match(ln.strip()) else ln for ln in lines]
    packages.read(listed + _pip_show(lines), facts)
    if (cuda := _first(_SMI_CUDA, body)) and "driver.version" in facts:
        facts["driver.cuda_version"] = cuda  # the smi header's CUDA: the newest the driver supports
    if torch_cuda := _first(_TORCH_CUDA, body):
        facts["torch.cuda"] = torch_cuda  # stated outright: it beats what a wheel tag implies
    if _WSL.search(body):
        facts["os.wsl"] = True  # only a stated WSL2; its absence from a few lines says nothing
    return facts
