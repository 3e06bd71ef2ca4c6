"""The one vocabulary the free-text reader knows: what each thing is called in a paste, which fact it states, and
what its value looks like.

A report names things in many ways ("PyTorch", "torch.__version__", "pytorch" in a conda row; "g++", "GCC & G++";
"glibc", "GNU libc", "ldd") and writes their values in a few shapes (a dotted version, a driver version with a
three-digit major, cuDNN's integer 8902). `NAMES` pairs each fact key with its aliases and its value shape; the
mention reader (mentions.py) finds an alias, then the value after it, in any of the separators people use
(`==`, `:`, `=`, `->`, `→`, "is", backticks, dotted leaders). Python packages without a fact key of their own are
kept as `pkg:<name>` and end up in `python.packages`, so the trainer's floors can judge them too.

A bare "CUDA" with a major.minor is not here on purpose: whose CUDA it is (torch's, the toolkit's, the driver's)
follows from the context, which mentions.py and signatures.py decide. With a full release ("CUDA 12.8.93") it can only
be a toolkit: the driver's CUDA and torch's are never written so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A version as people paste it: 2.4.0+cu121, 2.6.0.dev20241112+cu124, 0.0.28.post3, 2.11.0a0+git1234, 1.11.1.1.
# Bounded everywhere: every quantifier has a limit, so a near-miss costs a fixed amount of work per position.
VERSION = (r"\d{1,4}(?:\.\d{1,8}){1,3}(?:(?:a|b|rc)\d{1,4})?(?:\.?(?:post|dev)\d{0,14}){0,2}"
           r"(?:\+[A-Za-z0-9]{1,40}(?:\.[A-Za-z0-9]{1,40}){0,4})?")
# kind -> the value's regex (group 1 is the value)
SHAPES: dict[str, str] = {
    "version": rf"v?({VERSION})",
    # an NVIDIA driver: 535.104.05, 470.86; never a CUDA-like 12.2
    "driver": r"v?(\d{3}\.\d{1,3}(?:\.\d{1,3})?)",
    # a compiler: 13.2.0, 11.4, or only its major ("GCC 14")
    "gcc": r"v?(\d{1,2}(?:\.\d{1,2}(?:\.\d{1,2})?)?)",
    # cuDNN: 9.1.0, or torch's integer form (8902 = 8.9.2, 90100 = 9.1.0); its four-part release (9.3.0.75, as jtop and
    # the deb packages print it) is the same 9.3.0
    "cudnn": r"v?(\d{1,2}\.\d{1,2}(?:\.\d{1,3})?|\d{4,5})(?:\.\d{1,6})?",
    "bool": r"(True|False|Yes|No)",
    # a CUDA toolkit's full release (12.8.93, 12.4.1): only a toolkit is named so, never the driver's CUDA or torch's
    "toolkit": r"v?(\d{1,2}\.\d{1,2}\.\d{1,4})",
    # a CUDA library wheel (nvidia-cudnn-cu12 9.5.1.17): its release, as torch reports it (9.5.1)
    "library": r"v?(\d{1,2}\.\d{1,3}\.\d{1,4})(?:\.\d{1,6})?",
}


@dataclass(frozen=True)
class Name:
    """A fact and what a paste calls it; `pkg:<dist>` keys are Python packages without a fact key of their own."""

    key: str
    aliases: tuple[str, ...]
    kind: str = "version"


NAMES: tuple[Name, ...] = (
    # conda's CUDA runtime packages a conda torch is built against: "cudatoolkit=10.1", "pytorch-cuda=12.1"
    Name("torch.cuda", ("torch.version.cuda", "cuda used to build pytorch", "torch cuda version",
                        "pytorch cuda version", "torch cuda", "pytorch cuda", "pytorch-cuda", "cudatoolkit")),
    Name("torch.cuda_available", ("torch.cuda.is_available()", "is cuda available", "cuda available",
                                  "cuda is available", "pytorch cuda available", "torch cuda available"), "bool"),
    Name("torch.cudnn", ("torch.backends.cudnn.version()", "pytorch backend cudnn", "torch backend cudnn",
                         "torch cudnn version", "pytorch cudnn version", "torch cudnn", "pytorch cudnn"), "cudnn"),
    # the CUDA library wheels torch depends on: what torch loads (pip list, uv pip list, pip freeze)
    Name("torch.cudnn", ("nvidia-cudnn-cu11", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13"), "library"),
    Name("torch.nccl", ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13"), "library"),
    Name("torch.nccl", ("torch.cuda.nccl.version()", "nccl version", "nccl")),
    Name("torch.version", ("torch.__version__", "pytorch version", "torch version", "pytorch", "torch")),
    Name("nvcc.version", ("nvcc version", "nvcc", "cuda toolkit", "cuda-toolkit")),
    # a bare "CUDA" is only read with a toolkit's full release after it ("glibc 2.41 with CUDA 12.8.93")
    Name("nvcc.version", ("cuda",), "toolkit"),
    Name("driver.version", ("nvidia driver version", "nvidia driver", "nvidia-driver", "nv-driver", "nv driver",
                            "driver version", "driver", "驱动", "驅動"), "driver"),
    Name("gcc.version", ("gcc version", "g++ version", "gcc", "g++"), "gcc"),
    Name("glibc.version", ("glibc version", "gnu libc", "glibc", "libc version")),
    Name("python.version", ("python version", "python", "cpython", "py")),
    Name("cudnn.version", ("cudnn version", "cudnn"), "cudnn"),
    Name("flash_attn_3.version", ("flash-attn-3", "flash_attn_3", "flashattention-3", "flashattention 3", "fa3")),
    Name("flash_attn.version", ("flash-attn", "flash_attn", "flash-attention", "flashattention", "flash attention",
                                "fa2")),
    Name("xformers.version", ("xformers",)),
    Name("torchao.version", ("torchao",)),
    Name("setuptools.version", ("setuptools",)),
    Name("pip.version", ("pip",)),
    Name("ninja.version", ("ninja",)),
    Name("wheel.version", ("wheel",)),
    Name("packaging.version", ("packaging",)),
    *(Name(f"pkg:{dist}", (dist,)) for dist in (
        "transformers", "deepspeed", "vllm", "triton", "accelerate", "numpy", "tokenizers", "safetensors", "pyyaml",
        "bitsandbytes", "peft", "datasets", "ai2-olmo-core", "apex", "mamba-ssm", "causal-conv1d")),
)

# facts kept as major.minor whatever release a paste names (the toolkit's full release is nvcc.full_version)
MAJOR_MINOR = frozenset({"nvcc.version", "torch.cuda", "driver.cuda_version"})

# A distribution's name (normalised as pip does) -> the fact of its version; the rest go to python.packages.
PACKAGE_FACTS: dict[str, str] = {
    "torch": "torch.version", "pytorch": "torch.version", "flash-attn": "flash_attn.version",
    "flash-attn-3": "flash_attn_3.version", "xformers": "xformers.version", "torchao": "torchao.version",
    "setuptools": "setuptools.version", "pip": "pip.version", "ninja": "ninja.version", "wheel": "wheel.version",
    "packaging": "packaging.version",
}

# Python expressions people print, and the fact their value is: `print(torch.version.cuda)` then "12.1".
EXPRESSIONS: dict[str, tuple[str, str]] = {
    "torch.__version__": ("torch.version", "version"),
    "torch.version.cuda": ("torch.cuda", "version"),
    "torch.cuda.is_available()": ("torch.cuda_available", "bool"),
    "torch.backends.cudnn.version()": ("torch.cudnn", "cudnn"),
    "torch.cuda.nccl.version()": ("torch.nccl", "version"),
    "torch.cuda.device_count()": ("gpu.count", "count"),
    "sys.version": ("python.version", "version"),
    "platform.python_version()": ("python.version", "version"),
}
_MODULE_VERSION = re.compile(r"([A-Za-z_][\w]{0,40})\.__version__$")


def normalise(dist: str) -> str:
    """A distribution name as pip compares them: lower case, runs of -_. as one dash."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def package_fact(dist: str) -> str:
    """The fact key of a distribution's version: its own key, else `pkg:<name>` (python.packages)."""
    name = normalise(dist)
    return PACKAGE_FACTS.get(name, f"pkg:{name}")


def expression_fact(expr: str) -> tuple[str, str] | None:
    """(fact key, value kind) of a printed Python expression, or None for one the vocabulary does not know."""
    expr = expr.strip()
    if expr in EXPRESSIONS:
        return EXPRESSIONS[expr]
    if m := _MODULE_VERSION.match(expr):
        return package_fact(m.group(1)), "version"
    return None


def cudnn_version(value: str) -> str:
    """cuDNN as a dotted version: torch's integer 8902 is 8.9.2, 90100 is 9.1.0 (major*10000 from cuDNN 9 on)."""
    if not value.isdigit():
        return value
    n = int(value)
    major, rest = (n // 10000, n % 10000) if n >= 90000 else (n // 1000, n % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def cuda_from_int(value: str) -> str | None:
    """A CUDA version in the driver API's integer form: 11040 is 11.4, 12020 is 12.2."""
    if not value.isdigit() or not 1000 <= int(value) <= 99999:
        return None
    n = int(value)
    return f"{n // 1000}.{n % 1000 // 10}"
