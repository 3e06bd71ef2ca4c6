"""NVIDIA GPU name -> compute capability, for names that come without one (pasted reports, old nvidia-smi).

Standard library only: install.sh reads it through `python3 -m olmo_doctor.compat pick` before any venv exists.

A name is normalised first (lower case; '-', '_', '/', ',' and brackets become spaces; vendor words such as
'NVIDIA', 'GeForce', 'Tesla', 'Quadro', 'GRID', 'Jetson' stay but are never needed), then matched against the
patterns below in order, most specific first. Each pattern is a regular expression over that normalised name and
must match a whole token run: 'a10' does not match 'a100', 'l4' not 'l40', 't4' not 't400'. Suffixes after the
model ('80gb hbm3', 'sxm2 32gb', 'laptop gpu', 'max q', 'mig 1g.5gb', 'a100d 40c' vGPU profiles) are ignored.

Sources, named per family in the table: NVIDIA's CUDA GPUs list https://developer.nvidia.com/cuda-gpus (current
parts) and https://developer.nvidia.com/cuda-legacy-gpus (older ones), and the GPU table of
https://en.wikipedia.org/wiki/CUDA#GPUs_supported (GeForce 200 to 900, laptop and TITAN variants).
"""

from __future__ import annotations

import re

NVIDIA_CURRENT = "https://developer.nvidia.com/cuda-gpus"
NVIDIA_LEGACY = "https://developer.nvidia.com/cuda-legacy-gpus"
WIKIPEDIA = "https://en.wikipedia.org/wiki/CUDA#GPUs_supported"

# (family, source, [(pattern, compute capability), ...]); families are tried in this order.
FAMILIES: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("Blackwell data centre and workstation", NVIDIA_CURRENT, [
        (r"gb10", "12.1"),                                   # DGX Spark
        (r"rtx pro \d{3,4}", "12.0"),                        # every RTX PRO (6000 ... 500) is a Blackwell
        (r"gb300|b300", "10.3"),
        (r"gb200|b200|b100", "10.0"),
        (r"(jetson )?(agx )?thor", "11.0"),                   # 10.1 before CUDA 13 renumbered it
    ]),
    ("GeForce RTX 50 (desktop, Laptop, D)", NVIDIA_CURRENT, [
        (r"rtx 50[5-9]0", "12.0"),
    ]),
    ("Hopper", NVIDIA_CURRENT, [
        (r"gh200|h200|h100|h800|h20", "9.0"),
    ]),
    ("Ada Lovelace data centre and workstation", NVIDIA_CURRENT, [
        (r"l40s|l40g?|l20|l4|l2", "8.9"),
        (r"rtx \d{4}( sff)? ada", "8.9"),                     # RTX 6000/5880/5000/4500/4000 SFF/3500/2000 Ada
    ]),
    ("GeForce RTX 40 (desktop, Laptop, D, Ti, SUPER)", NVIDIA_CURRENT, [
        (r"rtx 40[5-9]0", "8.9"),
    ]),
    ("Ampere", NVIDIA_CURRENT, [
        (r"a100[a-z]?|a800|a30[a-z]?", "8.0"),
        (r"(jetson )?(agx )?orin", "8.7"),
        (r"a40|a10[gm]?|a16|a2", "8.6"),
        (r"rtx a\d{3,4}", "8.6"),                             # RTX A6000/A5500/A5000/A4500/A4000/A2000/A1000/A500
        (r"rtx 30[5-9]0|rtx 2050|mx570", "8.6"),                # the RTX 2050 laptop part is an Ampere GA107
    ]),
    ("Turing", NVIDIA_CURRENT, [
        (r"t4|t400|t500|t550|t600|t1000|t1200|t2000", "7.5"),
        (r"quadro rtx \d{4}|titan rtx|rtx 20[6-8]0", "7.5"),
        (r"gtx 16[3-6]0|mx[45]50", "7.5"),
    ]),
    ("Volta and Xavier", NVIDIA_LEGACY, [
        (r"v100[a-z]?|gv100|titan v", "7.0"),
        (r"(jetson )?(agx )?xavier", "7.2"),
    ]),
    ("Pascal", NVIDIA_LEGACY, [
        (r"p100|gp100", "6.0"),
        (r"titan xp|titan x pascal|(?<!gtx )titan x", "6.1"),  # "GeForce GTX TITAN X" is the Maxwell one
        (r"tegra x2|jetson tx2|tx2", "6.2"),
        (r"p40|p4|p6|quadro p\d{3,4}|gtx 10[5-8]0|gt 1030|mx150|mx2[35]0|mx3[35]0", "6.1"),
    ]),
    ("Maxwell", WIKIPEDIA, [
        (r"gtx titan x|m40|m60|m6|m4|quadro m[2-6]000|gtx 9[5-8]0(?!m)|gtx 9[78]0m|gtx 965m", "5.2"),
        (r"tegra x1|jetson (tx1|nano)|nano", "5.3"),
        (r"m10|quadro k(620|1200|2200)|quadro m\d{3,4}m?|gtx 7[45]0|gtx [89][56]0m|9[2-4]0mx?|8[34]0m|mx1[13]0",
         "5.0"),
    ]),
    ("Kepler", NVIDIA_LEGACY, [
        (r"k80", "3.7"),
        (r"tegra k1|jetson tk1", "3.2"),
        (r"k20[a-z]?|k40[a-z]?|gtx titan( black| z)?|titan( black| z)|gtx 780|gt 7[1-3]0|quadro k(6000|5200)", "3.5"),
        (r"k10|k520|grid k[12]|quadro k\d{3,4}|gtx 6[5-9]0|gtx 7[67]0|gt 6[34]0|gt 740", "3.0"),
    ]),
    ("Fermi", WIKIPEDIA, [
        (r"gtx 4[6]0|gtx 5[56]0|gt 4[2-4]0|gt 5[23]0|gt 6[12]0|quadro [2]000", "2.1"),
        (r"gtx 4[7-9]0|gtx 5[7-9]0|gtx 465|[cm]20[5-9]0|quadro [4-6]000", "2.0"),
    ]),
    ("Tesla (GeForce 200 and earlier)", WIKIPEDIA, [
        (r"gtx 2[6-9]\d|c1060|s1070|m1060", "1.3"),
        (r"gts? 2[2-4]0|geforce 210|gt 3[2-4]0", "1.2"),
        (r"8800 gtx|8800 ultra", "1.0"),
        (r"gts 250|9[5-8]00 gtx?|9800|8800 gt", "1.1"),
    ]),
]

_COMPILED = [(family, source, re.compile(rf"(?<![a-z0-9])(?:{pat})(?![0-9])"), cc)
             for family, source, rows in FAMILIES for pat, cc in rows]


def normalise(name: str) -> str:
    """'NVIDIA A100-SXM4-40GB MIG 1g.5gb' -> 'nvidia a100 sxm4 40gb mig 1g.5gb'."""
    low = name.lower().replace("(tm)", " ").replace("(r)", " ")
    low = re.sub(r"[-_/,()\[\]]+", " ", low)
    return " ".join(low.split())


def lookup(name: object) -> tuple[str, str, str] | None:
    """(compute capability, family, source) for a GPU name, or None when the table does not know it."""
    if not isinstance(name, str) or not name.strip():
        return None
    low = normalise(name)
    for family, source, pattern, cc in _COMPILED:
        if pattern.search(low):
            return cc, family, source
    return None


def name_to_cc(name: object) -> str | None:
    """Compute capability 'major.minor' for a GPU name ('Tesla V100-SXM2-32GB' -> '7.0'), or None."""
    hit = lookup(name)
    return hit[0] if hit else None
