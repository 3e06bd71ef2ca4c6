"""The NVIDIA GPUs a paste names, one entry per GPU, with the line each was read from: `nvidia-smi -L` and
collect_env's "GPU 0: NAME" lines, nvidia-smi's table rows, a list with one GPU name per line (Lightning's
environment report), else names in prose with a count ("2x RTX 3090", "8 x H100 80GB", "RTX A6000 x2",
"8 GPUs (H100)").

Only names the GPU table knows count (an AMD "RX 7900 XTX" or a word like "T1000x" is not an NVIDIA GPU). Two
different GPUs in prose ("works on A100, fails on my 3090"), two different counts, a class of GPUs ("A100 or
newer") or a cluster's size ("512x H100") leave the GPUs unknown.
"""

from __future__ import annotations

import re
from functools import lru_cache

from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.reports import collect_env

# `nvidia-smi -L` and collect_env's own "GPU 0: NAME" lines
# (matched on the stripped line: no open-ended blank runs for a long near miss to backtrack through)
# (a name is words, digits, dots, dashes and slashes: "NVIDIA A100-SXM4-80GB", "NVIDIA RTX 6000 Ada Generation")
# (sglang's check_env names several indices at once: "GPU 0,1,2,3: NVIDIA A100-SXM4-80GB")
_GPU_LINE = re.compile(r"GPU\s?(\d{1,3}(?:,\s?\d{1,3}){0,15}):\s{0,4}(\w[\w .\-/]{1,79}?)"
                       r"(?:\s{0,4}\(UUID:[^)]{0,100}\))?$", re.I)
# an nvidia-smi table row: "|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |"
_SMI_ROW = re.compile(r"^\|?\s{0,6}(\d{1,3})\s{1,6}((?:NVIDIA|Tesla|Quadro)\b[^|\n]{1,60}?)\s{1,40}"
                      r"(?:On|Off|TCC|WDDM)\s{0,4}\|")
# a GPU named in prose, with an optional count: "RTX 4090", "2x RTX 3090", "8 x H100 80GB", "A100", "L40S", a Jetson
# module ("NVIDIA Jetson AGX Orin")
# ("8 H100" counts too: "2 nodes x 8 H100" is eight per machine; a device index is no count: "cuda:0 NVIDIA ...")
_GPU_WORD = re.compile(
    r"(?<![\w.-])(?:(?<!:)(\d{1,3})(?:\s?[x×*]\s?|\s))?((?:NVIDIA\s)?(?:GeForce\s)?(?:(?:RTX|GTX|Quadro|Tesla|TITAN)\s?"
    r"[\w-]{1,12}(?:\s(?:Ti|SUPER|Ada))?|[ABHLTV]\d{1,3}[SG]?(?:[- ](?:SXM\d?|PCIe|NVL))?|GH200|GB200|B200|B300|"
    r"Jetson(?:\s(?:AGX|Orin|Xavier|Nano|NX|TX[12]|Thor|Super)){1,3})"
    r"(?:[\s-]?\d{2,3}\s?GB)?)"
    r"(?:\s?[x×*]\s?(\d{1,3}))?(?![\w+-]|\.\w)", re.I)  # a sentence's full stop may follow: "I use RTX 3090."
# a GeForce model number alone, said to be a GPU: "a 5080 GPU", "my 3090 card", "4090 Ti graphics card"
_GEFORCE = r"(?:10[5-8]0|16[56]0|20[6-8]0|30[5-9]0|40[6-9]0|50[5-9]0)"
_BARE_MODEL = re.compile(r"(?<![\w.-])(?<!RTX )(?<!GTX )(?<!rtx )(?<!gtx )"
                         rf"({_GEFORCE}(?:\s?(?:Ti|SUPER))?)"
                         r"(?=\s(?:GPUs?|cards?|graphics)\b)|"
                         # or after the vendor's name: "nvidia 4090d", "NVIDIA 3090" (China's D models too)
                         rf"(?<=nvidia )({_GEFORCE}(?:\s?(?:Ti|SUPER)|D)?)(?![\w.])|"
                         # or with "GPU" glued before it: "GPU3090", "GPU: 4090"
                         rf"(?<=GPU)(?::\s?|\s)?({_GEFORCE}(?:\s?(?:Ti|SUPER))?)"
                         r"(?![\w.])", re.I)
# a GeForce model number that can only be a GPU: with its Ti/SUPER ("2080ti", "4070 Super"), or with a count
# ("4090*4", "3090 x2", "8x 4090")
_MODEL_SAID = re.compile(rf"(?<![\w.-])(?:(?P<before>\d{{1,2}})\s?[x×*]\s?|[x×](?P<xbefore>\d{{1,2}})\s)?"
                         r"(?<!RTX )(?<!GTX )(?<!rtx )(?<!gtx )"
                         rf"(?P<model>{_GEFORCE}(?:\s?(?:Ti|SUPER)(?![\w.])|(?(before)|(?(xbefore)D?s?(?![\w.])|"
                         r"(?=\s?[x×*]\s?\d)))))"
                         r"(?:\s?[x×*]\s?(?P<after>\d{1,2}))?(?![\w]|\.\w)", re.I)
# after a name, a class of GPUs rather than one ("A100+", "A100 or newer", "Ampere and later"): not this machine's;
# or a CPU's cache level that reads like a GPU name (lscpu's "L2 cache:" is no NVIDIA L2)
_GPU_CLASS = re.compile(r"\s?(?:or|and)\s(?:newer|later|above|better|up)\b|\s?cache\b", re.I)
# the most GPUs one machine holds (HGX-2 and its kind: 16); a larger count in prose describes a cluster
_MAX_PER_MACHINE = 16
# "8 GPUs", "4x GPUs": a count said apart from the name
_GPU_COUNT = re.compile(r"(?<![\w.-])(\d{1,3})\s?(?:[x×*]\s?)?GPUs?\b|"
                        # or labelled: "GPU number: 8" (LLaMA-Factory's env), "GPU count: 4", "Number of GPUs: 2"
                        r"\bGPU (?:number|count):\s{0,4}(\d{1,3})\b|\bnumber of GPUs:\s{0,4}(\d{1,3})\b", re.I)
_BULLET = re.compile(r"^[-*•]\s{0,4}")
_VENDOR = re.compile(r"\b(?:NVIDIA|GeForce|Tesla|Quadro)\b", re.I)

Named = list[tuple[str, int]]


@lru_cache(maxsize=1024)
def cc_of(name: str) -> str | None:
    return name_to_cc(name) or name_to_cc(collect_env.expand_shorthand(name))


def key_of(name: str) -> str:
    return re.sub(r"\bnvidia\b|\bgeforce\b|\btesla\b|[\s-]", "", name.lower())


def _listed(lines: list[str]) -> Named:
    out: Named = []
    for i, line in enumerate(lines):
        m = _GPU_LINE.match(line.strip()) or _SMI_ROW.match(line)
        if m and (cc_of(m.group(2)) or _VENDOR.search(m.group(2))):
            out += [(m.group(2).strip().rstrip(". "), i)] * len(m.group(1).split(","))
    return out


def _one_per_line(lines: list[str]) -> Named:
    """A list with one GPU name per line (Lightning's environment report: "- NVIDIA A100-SXM4-40GB" per GPU)."""
    items = [(m.group(2), i) for i, ln in enumerate(lines)
             if (m := _GPU_WORD.fullmatch(_BULLET.sub("", ln.strip(), count=1)))]
    if len(items) > 1 and all(cc_of(n) for n, _ in items) and len(items) <= _MAX_PER_MACHINE:
        return items
    return []


def _singular(model: str) -> str:
    """A model number said in the plural ("two 4090Ds", "x2 3090s") as the one model."""
    return model[:-1] if re.fullmatch(r"\d{4}(?:D|d|Ti|ti)?s", model) else model


def _a_gpu(line: str, m: re.Match[str], name: str) -> bool:
    """Not a class of GPUs ("A100-class"), nor a word no GPU is called (like "T1000x")."""
    return not _GPU_CLASS.match(line, m.end()) and bool(cc_of(name))


def _prose_names(lines: list[str]) -> tuple[Named, set[int]]:
    """GPU names in prose (each sighting, with its line) and every count said with or apart from them."""
    names: Named = []
    counts: set[int] = set()
    for i, full in enumerate(lines):
        line = full[:4096]  # a GPU is named near the start of its line; a megabyte line is no statement
        for m in _GPU_WORD.finditer(line):
            name = m.group(2).strip()
            if _a_gpu(line, m, name):
                names.append((name, i))
                counts.update(int(c) for c in (m.group(1), m.group(3)) if c)
        models = (_singular(next(g for g in m.groups() if g)) for m in _BARE_MODEL.finditer(line))
        names += [(model, i) for model in models if cc_of(model)]
        for m in _MODEL_SAID.finditer(line):
            if (model := _singular(m.group("model").strip())) and cc_of(model):
                names.append((model, i))
                counts.update(int(c) for c in (m.group("before"), m.group("xbefore"), m.group("after")) if c)
        counts.update(int(next(g for g in m.groups() if g)) for m in _GPU_COUNT.finditer(line))
    return names, counts


def _prose(lines: list[str]) -> Named:
    names, counts = _prose_names(lines)
    if not names:
        return []
    keys = sorted({key_of(n) for n, _ in names}, key=len)
    if not all(k in keys[-1] for k in keys):  # "works on A100 but fails on my RTX 3090": which one?
        return []
    if len(counts) > 1:  # "2x RTX 3090 ... 4 GPUs": the count is not clear, so neither is the list
        return []
    count = counts.pop() if counts else 1
    if not 1 <= count <= _MAX_PER_MACHINE:  # "512x H100" is a cluster, "0x" a typo: no machine's count
        return []
    return [max(names, key=lambda n: len(n[0]))] * count


# a line labelled as the machine's GPU: "GPU: NVIDIA RTX A6000, compute capability 8.6", "- GPU model: 2x RTX 3090",
# "Graphics card: RTX 4090", "显卡：RTX 4090" (the label's value starts with the name)
_LABEL = re.compile(r"^\s{0,8}(?:[-*•]\s{0,4})?\**(?:GPUs?(?: model| type| name)?|Graphics card|Video card|显卡|"
                    r"グラフィックボード|그래픽 ?카드)\**\s{0,4}[:：]\s{0,4}", re.I)


def _labelled(lines: list[str]) -> Named:
    """The GPUs a labelled line names, when every such line names one model (other GPUs named in prose, such as a
    list of examples, do not count against it)."""
    found: Named = []
    counts: set[int] = set()
    for i, line in enumerate(lines):
        if not (label := _LABEL.match(line)):
            continue
        value = line[label.end():label.end() + 200]
        m = _GPU_WORD.match(value)
        if m is None or not _a_gpu(value, m, m.group(2).strip()):
            continue
        found.append((m.group(2).strip(), i))
        counts.add(int(m.group(1) or m.group(3) or 1))
    if not found or len({key_of(n) for n, _ in found}) > 1 or len(counts) > 1:
        return []
    count = counts.pop()
    return [found[0]] * count if 1 <= count <= _MAX_PER_MACHINE else []


def gpus(lines: list[str], devices: Named | None = None) -> Named:
    """(name, line index) per GPU: listed lines first, then `devices` (GPUs a tool named by their device index,
    torch's "Found GPU1 ..." warnings), a labelled GPU line, a one-per-line list, else names in prose."""
    return _listed(lines) or devices or _labelled(lines) or _one_per_line(lines) or _prose(lines)
