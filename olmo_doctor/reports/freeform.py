"""Facts from text as people paste it into an issue: prose ("I'm using GCC 14 and CUDA 12.8"), tool outputs (`nvcc
-V`, `nvidia-smi`, `gcc --version`, `ldd --version`, `ds_report`, `transformers env`, torch's own warnings), package
lists (`pip list`, `pip freeze`, `conda list`, `uv pip list`), Python printouts and REPL sessions, wheel file names.

Three readers look at the unwrapped lines (paste.py): tool signatures first (signatures.py: a tool's output says
whose value each number is, so those lines are not read again), Python printouts (printouts.py), then the
vocabulary-driven mention reader on everything else (mentions.py). GPUs come from gpu_names.py. Each reader gives
Observations with their line; observe.resolve keeps a value seen once or several times alike and leaves a fact
stated twice with different values unknown (two machines, two attempts, a "vs").

Lines that name a version someone wants rather than one installed are not read as facts: install commands,
pip's resolver errors, requirement lines, and the compiler list of `torch.__config__.show()` ("PyTorch built with:
- GCC 9.3"). What the text does not state stays unknown, so rules that need it stay quiet and say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from olmo_doctor.facts import Facts
from olmo_doctor.reports import accept, forms, gpu_names, mentions, packages, paste, printouts, signatures, tool_outputs
from olmo_doctor.reports.observe import Observation, Source, Sources, resolve
from olmo_doctor.reports.vocabulary import NAMES

# install commands, pip's resolver and download chatter: whole lines of versions wanted, not installed (a
# requirement said in a sentence is the mention reader's: "requires torch 2.6" there, "but I have 2.4" beside it)
_NOT_INSTALLED = re.compile(r"\b(?:(?:pip3?|conda|mamba|micromamba|uv|poetry)\s+(?:pip\s+)?(?:install|add)\b|"
                            # pip's requirement chains: "torch==2.9.0 -> xformers==0.0.33 -> -r requirements.txt
                            # (line 35)"
                            r"requirements[\w./-]{0,60}\.txt \(line \d{1,6}\)|"
                            r"satisfies the requirement|no matching distribution|Requirement already satisfied|"
                            r"^\s*(?:Collecting|Downloading|Using cached|Looking in indexes)\b)", re.I)
_BUILT_WITH = re.compile(r"\bbuilt with:\s*$", re.I)
# a version a project moves its dependency to ("so bump version to 2.8.0+cu128", "bumps torch from 2.7 to 2.8"): the
# line speaks of a requirement, not of a machine
_BUMP = re.compile(r"\bbump(?:s|ed|ing)?\b[^\n]{0,60}?\bto\b", re.I)
# a Dockerfile's instructions and their continuation lines: a recipe for an environment, not one observed
_DOCKER_FROM = re.compile(r"^\s{0,4}FROM\s{1,4}[\w./:@${}-]{1,200}(?:\s{1,4}AS\s{1,4}\w{1,40})?\s*$", re.I)
_DOCKER_STEP = re.compile(r"^\s{0,4}(?:FROM|RUN|ENV|ARG|COPY|ADD|WORKDIR|CMD|ENTRYPOINT|LABEL|SHELL|USER)\s")
# an install command quoted inside a sentence ("When I run `pip install deepspeed` on my ... with Python 3.12.4"):
# the command is not read, the sentence around it is
_CODE_SPAN = re.compile(r"`[^`\n]{1,300}`")
# "on WSL2" or "on WSL" (CUDA runs only under WSL 2), not WSL 1, not a path ("/mnt/wsl2-data") and not a denial
# ("not WSL2", "no WSL2", "non-WSL2"); a shell in a Windows drive mounted by WSL ("/mnt/c/", "/mnt/d/Users/")
_WSL = re.compile(r"(?<![\w/.-])(?<!\bnot )(?<!\bno )(?<!\bnon-)(?<!\bnot on )(?<!\bnot in )"
                  r"WSL(?: ?2)?(?![\w/.-]| ?1\b)|Windows Subsystem for Linux(?: 2)?|microsoft-standard-WSL2|"
                  r"(?<![\w.])/mnt/(?:c|[a-z]/Users)/", re.I)
# a bare conda (or pixi) list row for torch with its wide columns: "pytorch  2.1.0  py3.10_cuda12.1_cudnn8.9.2_0
# pytorch", "pytorch  2.5.1  cuda126_py312h1763f6d_306  35.3 MiB  conda  https://conda.anaconda.org/conda-forge/"
# (a build string is lower case and runs on: "py3.10_...", "cuda126_...", "cpu_py311...", Anaconda's
# "gpu_cuda121py312h...": not "CUDA 12.1," in prose)
_CONDA_ROW = re.compile(r"^(?i:(?:py)?torch)\s+\d[^\s,]{0,40}\s+(?:py\d|cuda\d|cpu_|gpu_)[^\s,]{0,80}"
                        r"(?:\s+\S{1,200}){0,6}$")
_KNOWN_PACKAGES = {n.key for n in NAMES if n.key.startswith("pkg:")}


def _dockerfile(lines: list[str]) -> set[int]:
    """The lines of a Dockerfile pasted into the text (from a FROM line on: its instructions and the lines a
    trailing backslash continues)."""
    out: set[int] = set()
    inside = continued = False
    for i, line in enumerate(lines):
        if _DOCKER_FROM.match(line):
            inside = True
        if inside and (continued or _DOCKER_STEP.match(line)):
            out.add(i)
        elif inside and line.strip().startswith("```"):
            inside = False
        continued = inside and line.rstrip().endswith("\\")
    return out


def not_stated(lines: list[str]) -> set[int]:
    """Indexes of lines that name versions wanted or built with, not installed."""
    out: set[int] = _dockerfile(lines) | {i for i, ln in enumerate(lines) if paste.side_by_side(ln)}
    in_built_with = False
    for i, line in enumerate(lines):
        if _BUILT_WITH.search(line):
            in_built_with = True
            out.add(i)
            continue
        if in_built_with and line.lstrip().startswith("-"):
            out.add(i)
            continue
        in_built_with = False
        if _NOT_INSTALLED.search(without_commands(line)) or _BUMP.search(line):
            out.add(i)
    return out


# a logger's timestamp written into the middle of a line (ComfyUI prefixes every write: "** Python version:2025-11-27
# T00:45:36.445695 -  2025-11-27T00:45:36.445785 - 3.13.9"), and an issue template's unfilled example ("GPU count and
# types [e.g. two machines with x8 A100s each]"): neither states a value
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\s{0,2}-\s{1,2}")
_PLACEHOLDER = re.compile(r"[\[(](?:e\.g\.|eg\.|for example|example:|such as)[^\])\n]{0,300}[\])]", re.I)


def _without_placeholders(line: str) -> str:
    if "-" in line and ":" in line:
        line = _TIMESTAMP.sub(" ", line)
    if "e.g" in line or "eg." in line or "xample" in line or "such as" in line:
        line = _PLACEHOLDER.sub(lambda m: " " * len(m.group(0)), line)
    return line


def without_commands(line: str) -> str:
    """The line with install commands quoted in backticks blanked out (same length, so positions still hold)."""
    if "`" not in line:
        return line
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)) if _NOT_INSTALLED.search(m.group(0)) else m.group(0), line)


def _package_lines(lines: list[str], skip: set[int]) -> list[Observation]:
    """collect_env's `[pip3] torch==2.2.1` / `[conda] ...` lines and bare conda rows for torch, as packages.py
    reads them (a conda build string says torch's CUDA; nvidia-* wheels say its cuDNN and NCCL)."""
    tagged = [(i, f"[conda] {ln.strip()}" if _CONDA_ROW.match(ln.strip()) else ln) for i, ln in enumerate(lines)
              if i not in skip]
    if not any(ln.lstrip().startswith("[") for _, ln in tagged):
        return []
    found: Facts = {}
    packages.read([ln for _, ln in tagged], found)
    out = []
    for key, value in found.items():
        at = next((i for i, ln in tagged if isinstance(value, str) and value in ln), tagged[0][0])
        out.append(Observation(key, value, at, lines[at]))
    return out


# torch warns once per distinct device: more names than any machine holds GPUs is no machine's (and would make
# matching each listed GPU against them quadratic)
MAX_WARNED = 64


@dataclass(frozen=True)
class Warned:
    """A GPU torch's own warning names, with the compute capability it states (and the line saying so)."""

    name: str
    cc: str
    line: int
    index: int | None  # "Found GPU1 ...": torch's device index; the capability warning names no index


def _same_gpu(a: str, b: str) -> bool:
    ka, kb = gpu_names.key_of(a), gpu_names.key_of(b)
    return ka.endswith(kb) or kb.endswith(ka)


def _warnings(obs: list[Observation]) -> list[Warned]:
    """The warned GPUs by slot (a device index or a name), each with both its name and its capability."""
    slots: dict[str, dict[str, Observation]] = {}
    for ob in obs:
        slot, _, field_name = ob.key[len(signatures.WARNED):].rpartition(".")
        slots.setdefault(slot, {})[field_name] = ob
    return [Warned(str(seen["name"].value), str(seen["cc"].value), seen["cc"].line,
                   int(slot) if slot.isdigit() else None)
            for slot, seen in slots.items() if "name" in seen and "cc" in seen][:MAX_WARNED]


def _warned_gpus(obs: list[Observation]) -> list[Warned]:
    """One entry per GPU torch warned about: the too-old-GPU warning's device index and the capability warning's
    name are the same GPU when the names agree."""
    found = _warnings(obs)
    indexed = [w for w in found if w.index is not None]  # one per device: two identical GPUs stay two
    named = [w for w in found if w.index is None and not any(_same_gpu(w.name, d.name) for d in indexed)]
    return sorted(indexed, key=lambda w: w.index or 0) + named


def _gpu_facts(lines: list[str], warned: list[Warned], facts: Facts, sources: Sources) -> None:
    count = facts.get("gpu.count")
    if isinstance(count, int) and count > 0 and all(f"gpu.{i}.name" in facts for i in range(count)):
        return  # a table that lists every GPU by index (nvidia-smi's query CSV) already said it
    devices = [(w.name, w.line) for w in warned if w.index is not None]
    named = gpu_names.gpus(lines, devices) or [(w.name, w.line) for w in warned]  # else only torch's warnings do
    if not named:
        return
    facts["gpu.count"] = len(named)
    sources["gpu.count"] = Source(named[0][1] + 1, lines[named[0][1]].strip())
    for i, (name, at) in enumerate(named):
        facts[f"gpu.{i}.name"] = name
        sources[f"gpu.{i}.name"] = Source(at + 1, lines[at].strip())
        said = next((w for w in warned if _same_gpu(w.name, name)), None)
        if said is not None:
            _warned_cc(i, said, lines, facts, sources)


def _warned_cc(i: int, said: Warned, lines: list[str], facts: Facts, sources: Sources) -> None:
    """GPU i's compute capability, from the warning torch printed about it."""
    facts[f"gpu.{i}.compute_capability"] = said.cc
    sources[f"gpu.{i}.compute_capability"] = Source(said.line + 1, lines[said.line].strip())


def _first_source(pkgs: list[str], sources: Sources) -> Source:
    """The earliest line a known package was read from."""
    return min((sources[k] for k in pkgs if k in _KNOWN_PACKAGES), key=lambda s: s.line)


def _packages_list(facts: Facts, sources: Sources) -> None:
    """`pkg:<name>` facts (packages without a key of their own) as one `python.packages` list."""
    pkgs = sorted(k for k in facts if k.startswith("pkg:"))
    listed = [f"{k[4:]}=={facts[k]}" for k in pkgs if k in _KNOWN_PACKAGES and isinstance(facts[k], str)]
    if listed:
        facts["python.packages"] = listed
        sources["python.packages"] = _first_source(pkgs, sources)
    for k in pkgs:
        facts.pop(k, None)
        sources.pop(k, None)


@dataclass
class Reading:
    """What a paste states: facts, the line each came from, and the facts it states twice, differently."""

    facts: Facts = field(default_factory=dict)
    sources: Sources = field(default_factory=dict)
    conflicts: set[str] = field(default_factory=set)


def _wsl(lines: list[str], skip: set[int]) -> list[Observation]:
    """"on WSL2" said of this machine (not denied, not a path), and the WSL2 kernel's name."""
    return [Observation("os.wsl", True, i, ln) for i, ln in enumerate(lines)
            if i not in skip and ("wsl" in ln.lower() or "/mnt/" in ln) and (m := _WSL.search(ln))
            and mentions.stated_here(ln, m.start())]


def _observe(lines: list[str], skip: set[int]) -> list[Observation]:
    """Every reader's observations: tool signatures first (the lines and parts they read are not read again),
    Python printouts, the mention reader, issue-form fields, collect_env's package lines, WSL2."""
    obs, used, taken = signatures.read(lines)
    printed, printed_lines = printouts.read(lines)
    obs += printed
    obs += mentions.mentions(lines, skip | used | printed_lines, taken)
    obs += forms.read(lines, skip | used | printed_lines)
    obs += _package_lines(lines, skip | used)
    return _banner_vocabulary(obs + _wsl(lines, skip))


def _banner_vocabulary(obs: list[Observation]) -> list[Observation]:
    """In a paste holding Unsloth's banner, "CUDA Toolkit" is its label for torch's CUDA wherever the paste repeats
    it (a bullet list copied from the banner), not nvcc's."""
    if not any(ob.key == tool_outputs.UNSLOTH for ob in obs):
        return obs
    return [Observation("torch.cuda", ob.value, ob.line, ob.text)
            if ob.key == "nvcc.version" and tool_outputs.TOOLKIT_LABEL.search(ob.text) else ob
            for ob in obs if ob.key != tool_outputs.UNSLOTH]


def read(text: str) -> Reading:
    """The facts a paste states, each with the line it was read from."""
    lines = paste.unwrap(text)
    # olmo-doctor's own summary lines are its rendering of some machine, not a statement to read back
    own = accept.own_output(lines)
    lines = ["" if i in own else _without_placeholders(without_commands(ln)) for i, ln in enumerate(lines)]
    skip = not_stated(lines)
    recipe = _dockerfile(lines)  # a recipe is no printout or tool output either: no reader sees it
    lines = ["" if i in recipe else ln for i, ln in enumerate(lines)]
    obs = _observe(lines, skip)
    warned = _warned_gpus([ob for ob in obs if ob.key.startswith(signatures.WARNED)])
    facts, sources, conflicts = resolve([ob for ob in obs if not ob.key.startswith(signatures.WARNED)], lines)
    _gpu_facts([ln if i not in skip else "" for i, ln in enumerate(lines)], warned, facts, sources)
    _packages_list(facts, sources)
    return Reading(facts, sources, conflicts)


def parse(text: str) -> Facts:
    """The facts a few free-form lines state; {} when they state none."""
    return read(text).facts
