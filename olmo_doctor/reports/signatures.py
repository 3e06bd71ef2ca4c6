"""Tool outputs inside a paste, each recognised by its own signature: what the tool printed says exactly whose
value it is, so these lines are read here and not again by the free-text reader.

- torch's capability warning ("RTX 5090 with CUDA capability sm_120 is not compatible ... supports CUDA
  capabilities sm_50 ... sm_90"): the GPU's compute capability *and* torch's arch list;
- torch's driver-too-old warning ("found version 11040"): the driver's CUDA, 11.4;
- `nvidia-smi`'s header (the driver and the CUDA it supports; its own "NVIDIA-SMI" number is not the driver's);
- `nvcc -V` ("release 12.4, V12.4.131") and its build tag (`cuda_12.1.r12.1`, a bare `- cuda_12.1`);
- `gcc --version` / `g++ -v` / CMake's compiler identification; `ldd --version`; a platform's `-with-glibc2.35`;
- `transformers env` / `accelerate env`'s "PyTorch version (GPU?): 2.3.1+cu121 (True)";
- torch.utils.cpp_extension's and DeepSpeed's CUDA mismatch errors (the nvcc found and torch's CUDA);
- flash-attn's "nvcc was not found" and cpp_extension's "CUDA_HOME environment variable is not set";
- xformers' "xFormers was built for: PyTorch 2.0.1 (you have 2.1.0+cu121)";
- torch's CUDA named on its own line: "PyTorch ... compiled with CUDA 11.8", "PyTorch index: `cu121`";
- an import failing on a missing symbol or library, by the package whose binary it names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from olmo_doctor.facts import FactValue
from olmo_doctor.reports import tool_outputs
from olmo_doctor.reports.observe import UNREADABLE, Observation
from olmo_doctor.reports.vocabulary import VERSION, cuda_from_int

Facts = list[tuple[str, FactValue]]
Spans = dict[int, list[tuple[int, int]]]


@dataclass(frozen=True)
class LineSignature:
    """A pattern one line of a tool's output matches, and the facts its match states. `consume`: the line says
    nothing more, so the free-text reader skips it (it would misread the tool's other numbers)."""

    needle: str  # a lower-case word every match holds: lines without it are not searched at all
    pattern: re.Pattern[str]
    facts: Callable[[re.Match[str]], Facts]
    consume: bool = True


def _g(name: str, key: str) -> Callable[[re.Match[str]], Facts]:
    return lambda m: [(key, m.group(name))] if m.group(name) else []


def _smi(m: re.Match[str]) -> Facts:
    out: Facts = [("driver.version", m.group("driver"))]
    if m.group("err"):  # nvidia-smi could not read it (WSL with mismatched libraries): unknown, never guessed
        return [*out, ("driver.cuda_version", UNREADABLE)]
    return out + ([("driver.cuda_version", m.group("cuda"))] if m.group("cuda") else [])


def _too_old(m: re.Match[str]) -> Facts:
    cuda = cuda_from_int(m.group(1))
    return [("driver.cuda_version", cuda)] if cuda else []


def _mismatch(m: re.Match[str]) -> Facts:
    return [("nvcc.version", m.group("nvcc")), ("torch.cuda", m.group("torch"))]


def _nvcc_full(m: re.Match[str]) -> Facts:
    return [("nvcc.version", m.group(1)), ("nvcc.full_version", m.group(2))]


def _no_nvcc(m: re.Match[str]) -> Facts:
    return [("nvcc.version", None), ("nvcc.path", None)]


def _gpu_available(m: re.Match[str]) -> Facts:
    return [("torch.version", m.group(1)), ("torch.cuda_available", m.group(2) in ("True", "CUDA"))]


_RELEASE_NEWS = re.compile(r"\b(?:changes?|moves?|switches|will|stable|default|nightly|PyPI|release[sd]?)\b", re.I)


def _torch_cuda_tag(m: re.Match[str]) -> Facts:
    # one tag on the line: "PyTorch `2.11` -> `cu126`, `cu128`, `cu130`" is a build matrix, no machine's
    if len(set(re.findall(r"(?<![\w.])cu\d{3}(?!\w|\.\w)", m.string))) > 1:
        return []
    # nor is news of a release: "pytorch 2.11 changes the stable version on PyPI to cu130"
    if _RELEASE_NEWS.search(m.group(0)):
        return []
    digits = m.group(1)
    return [("torch.cuda", f"{int(digits[:-1])}.{digits[-1]}")]


_V = VERSION


def _compact_tag(m: re.Match[str]) -> Facts:
    """py310 is Python 3.10, torch231 torch 2.3.1 (three digits, one each), cu121 CUDA 12.1."""
    py, torch, cu = m.group("py"), m.group("t"), m.group("cu")
    py = py if "." in py else f"{py[0]}.{py[1:]}"
    torch = torch if "." in torch else ".".join(torch)
    return [("python.version", py), ("torch.version", torch), ("torch.cuda", f"{int(cu[:-1])}.{cu[-1]}")]


def _sig(needle: str, pattern: str, facts: Callable[[re.Match[str]], Facts], consume: bool = True,
         flags: int = 0) -> LineSignature:
    return LineSignature(needle, re.compile(pattern, flags), facts, consume)


_DRIVER = r"\d{3}\.\d{1,3}(?:\.\d{1,3})?"
_MM = r"\d{1,2}\.\d{1,2}"
LINES: tuple[LineSignature, ...] = (
    # (from R610 on the header says "KMD Version: 610.43.02   CUDA UMD Version: 13.3")
    _sig("version:", rf"(?:Driver|KMD) Version:\s{{0,8}}(?P<driver>{_DRIVER})"
         rf"(?:\s{{1,40}}CUDA (?:UMD )?Version:\s{{0,8}}(?:(?P<cuda>{_MM})|(?P<err>ERR!|N/A)))?", _smi),
    # the kernel module's own version: `dkms status` ("nvidia-current, 470.199.02, 5.10.0-26-amd64, x86_64:
    # installed", "nvidia/535.104.05, 6.2.0, x86_64: installed") and /proc/driver/nvidia/version ("NVRM version:
    # NVIDIA UNIX x86_64 Kernel Module  535.104.05")
    _sig("installed", rf"(?<![\w-])nvidia(?:-[a-z]{{1,12}}){{0,2}}[,/]\s?(?P<v>{_DRIVER})"
         r"(?:,\s?[^,\n]{1,60}){1,2}:\s?installed", _g("v", "driver.version"), flags=re.I),
    _sig("kernel module", rf"NVRM version:[^\n]{{0,60}}?Kernel Module(?: for (?:aarch64|x86_64|ppc64le))?\s{{1,8}}"
         rf"(?P<v>{_DRIVER})\b",
         _g("v", "driver.version")),
    # `python -m xformers.info`: "pytorch.version:  2.0.1+cu118", "pytorch.cuda:  available", and what xformers
    # was built for ("build.torch_version:"; its build.python_version is the build machine's, not read)
    _sig("pytorch.version", rf"^\s{{0,4}}pytorch\.version:\s{{1,60}}(?P<v>{_V})\s{{0,8}}$", _g("v", "torch.version")),
    _sig("pytorch.cuda", r"^\s{0,4}pytorch\.cuda:\s{1,60}(?P<v>available|not available)\s{0,8}$",
         lambda m: [("torch.cuda_available", m.group("v") == "available")]),
    _sig("build.", r"^\s{0,4}build\.(?:(?P<t>torch_version)|[\w.]{1,60}):\s{1,60}(?P<v>[^\n]{0,200})$",
         lambda m: [("xformers.built_for_torch", m.group("v").strip())] if m.group("t") else []),
    # a compact environment tag, as image and wheel names write them: "py310-torch231-cu121", "py3.11_torch2.4.0_cu124"
    _sig("torch", r"(?<![\w.])py(?P<py>3\.?\d{1,2})[-_]torch(?P<t>\d\.\d{1,2}\.\d{1,2}|\d{3})[-_]"
         r"cu(?P<cu>\d{3})(?![\w.])", lambda m: _compact_tag(m), flags=re.I),
    _sig("too old", r"driver on your system is too old \(found version (\d{4,6})\)", _too_old, flags=re.I),
    _sig("compilation tools", rf"Cuda compilation tools, release ({_MM}), V(\d{{1,2}}\.\d{{1,2}}\.\d{{1,4}})",
         _nvcc_full),
    _sig("cuda_", rf"(?<![\w.])cuda_(?P<v>{_MM})(?![\d_])", _g("v", "nvcc.version"), flags=re.I),
    _sig("c", r"(?<![\w./\[-])(?:gcc|g\+\+|c\+\+|cc)(?:-\d{1,2})? \([^)\n]{1,80}\) "
         r"(?P<v>\d{1,2}\.\d{1,2}(?:\.\d{1,2})?)(?![\w.])", _g("v", "gcc.version")),
    _sig("compiler identification", r"The CXX compiler identification is GNU (?P<v>\d{1,2}\.\d{1,2}(?:\.\d{1,2})?)",
         _g("v", "gcc.version")),
    _sig("ldd", r"\bldd \([^)\n]{1,60}\) (?P<v>\d\.\d{1,2})\b", _g("v", "glibc.version")),
    _sig("gnu c library", r"GNU C Library [^\n]{0,60}?release version (?P<v>\d\.\d{1,2})\b", _g("v", "glibc.version")),
    _sig("glibc", r"-with-glibc(?P<v>\d\.\d{1,2})\b|__glibc=(?P<w>\d\.\d{1,2})\b",
         lambda m: [("glibc.version", m.group("v") or m.group("w"))], consume=False),
    # transformers/accelerate env: "(GPU?): 2.3.1+cu121 (True)", newer "(accelerator?): 2.5.1+cu124 (CUDA)"
    _sig("?):", rf"PyTorch version \((?:GPU|accelerator)\?\):\s{{0,8}}({_V})\s{{0,8}}\((True|False|CUDA|NA)\)",
         _gpu_available),
    _sig("installed cuda version", rf"Installed CUDA version (?P<nvcc>{_MM}) does not match the version torch "
         rf"was compiled with (?P<torch>{_MM})", _mismatch),
    _sig("not", r"\bnvcc was not found|CUDA_HOME environment variable is not set", _no_nvcc),
    # the driver's CUDA said of nvidia-smi in prose: "nvidia-smi shows CUDA 12.2", "nvidia-smi: CUDA Version 12.4",
    # "nvidia-smi shows cuda version is 12.4"
    # (nothing between them names another CUDA: "nvidia-smi works but nvcc says CUDA 11.8" is the toolkit's)
    _sig("nvidia-smi", rf"\bnvidia-smi\b(?:(?!nvcc|torch|toolkit|runtime)[^\n]){{0,40}}?\bCUDA(?: Version)?"
         rf"(?:\s{{0,2}}(?::|=|is|of))?\s{{0,3}}"
         rf"(?P<v>{_MM})\b", _g("v", "driver.cuda_version"), consume=False, flags=re.I),
    # cpp_extension's mismatch raised with its arguments unformatted (a tuple's repr): "('The detected CUDA version
    # (%s) mismatches the version that was used to compile PyTorch (%s)...', '12.8', '13.0')"
    _sig("mismatches", rf"detected CUDA version \(%s\) mismatches[^\n]{{0,200}}?['\"](?P<nvcc>{_MM})['\"],\s{{0,4}}"
         rf"['\"](?P<torch>{_MM})['\"]", _mismatch),
    # torchvision's import check: "PyTorch has CUDA Version=11.8 and torchvision has CUDA Version=12.1"
    _sig("torchvision has cuda", rf"PyTorch has CUDA Version\s?=\s?(?P<v>{_MM})(?:\.\d{{1,4}})?\s{{1,4}}and "
         r"torchvision has CUDA Version", _g("v", "torch.cuda"), flags=re.I),
    # torch's own CUDA named on its line: "PyTorch: 2.2.0 (..., compiled with CUDA 11.8)", "torch built for CUDA 12.1"
    _sig("cuda", rf"(?<![\w./-])(?:py)?torch\b[^\n]{{0,80}}?\b(?:compiled|built) (?:with|for|against) "
         rf"CUDA[ -]?(?P<v>{_MM})\b", _g("v", "torch.cuda"), consume=False, flags=re.I),
    # the driver's CUDA said in prose: "the installed driver is compatible with CUDA 12.4", "my driver supports up to
    # CUDA 12.2" (the newest CUDA a driver runs is what nvidia-smi's header prints)
    _sig("driver", rf"\bdriver\b(?:(?!nvcc|torch|toolkit|runtime)[^\n]){{0,40}}?\b(?:is compatible with|compatible "
         rf"with|supports?(?: up to)?)\s{{1,3}}CUDA(?: version)?\s{{0,3}}(?P<v>{_MM})\b",
         _g("v", "driver.cuda_version"), consume=False, flags=re.I),
    # torch's own CUDA said beside its version: "torch 2.5.0 stable from pip with cuda 12.4", "PyTorch 2.1 with CUDA
    # 11.8" (not when another CUDA's owner is named between them: "torch 2.1 and the CUDA toolkit with cuda 12.1")
    _sig("cuda", rf"(?<![\w./-])(?:py)?torch\s{{0,2}}v?\d{{1,2}}\.\d{{1,2}}(?:\.\d{{1,2}})?(?:\+\w{{1,20}})?"
         rf"(?:(?!nvcc|toolkit|driver|system|installed|runtime)[^\n]){{0,40}}?\bwith\s{{1,2}}cuda[ -]?(?P<v>{_MM})\b",
         _g("v", "torch.cuda"), consume=False, flags=re.I),
    # torch's wheel index named beside it: "PyTorch index: `cu121`" (not a URL's /whl/cu121, not a +cu121 tag)
    _sig("cu", r"(?<![\w./-])(?:py)?torch\b[^\n/]{0,60}?(?<![\w/.+-])cu(\d{3})(?![\w.])", _torch_cuda_tag,
         consume=False, flags=re.I),
)

# lines that only say which numbers a binary wants or was built with: nothing here is this machine's
_DETECTED = re.compile(r"detected CUDA version \((?P<nvcc>\d{1,2}\.\d{1,2})\) mismatches the version that was used "
                       r"to compile\s{0,8}(?:PyTorch)?\s{0,8}\((?P<torch>\d{1,2}\.\d{1,2})\)")
# found by its fixed words first: a lazy name group in front would be tried at every position of a long line
_CAPABILITY = re.compile(r" with CUDA capability sm_(?P<cc>\d{2,3})[af]? is not compatible")
_OLD_GPU = re.compile(r"Found GPU(?P<i>\d{1,2}) (?P<name>[^\n]{1,80}?) which is of cuda capability (?P<cc>\d{1,2}\.\d)")
_USE_GPU = re.compile(r"If you want to use the (?P<name>[^\n]{1,80}?) GPU with PyTorch")
_ARCHS = re.compile(r"supports CUDA capabilities (?P<archs>(?:(?:sm|compute)_\d{2,3}[af]?\s{1,4}){0,40}"
                    r"(?:sm|compute)_\d{2,3}[af]?)")
_XFORMERS = re.compile(r"xFormers was built for", re.I)
_XF_TORCH = re.compile(rf"PyTorch\s{{1,8}}({_V})(?:\s{{1,4}}with CUDA\s{{1,4}}\d{{3,5}})?\s{{1,8}}\(you have ({_V})\)")
_XF_PYTHON = re.compile(rf"Python\s{{1,8}}({_V})\s{{1,8}}\(you have ({_V})\)")
_IMPORT = re.compile(r"(?:version [`'‘](?:GLIBC|GLIBCXX|CXXABI)_[\d.]{1,12}[`'’] not found|undefined symbol: \S{1,300}|"
                     r"cannot open shared object file|DLL load failed while importing (?P<dll>\w{1,60}))")
_BINARY_OF = re.compile(r"[/\\](?P<mod>flash_attn_2_cuda|flash_attn_3|_flash_attn3|flash_attn_interface|flash_attn|"
                        r"xformers|torchao|torch)[/\\._]")
_PACKAGE_OF_MODULE = {"flash_attn_2_cuda": "flash_attn", "flash_attn": "flash_attn", "flash_attn_3": "flash_attn_3",
                      "_flash_attn3": "flash_attn_3", "flash_attn_interface": "flash_attn_3", "xformers": "xformers",
                      "torchao": "torchao", "torch": "torch"}


def _cc(digits: str) -> str:
    return f"{int(digits[:-1])}.{digits[-1]}"


def _gpu_name(text: str) -> str:
    """The GPU's name from the words before "with CUDA capability": from its vendor word on."""
    m = re.search(r"(?:NVIDIA|GeForce|Tesla|Quadro|TITAN|RTX|GTX)\b[^\n]{0,60}$", text.strip(), re.I)
    return (m.group(0) if m else text.strip()[-60:]).strip()


def _lines(lines: list[str], obs: list[Observation], spans: Spans) -> None:
    for i, line in enumerate(lines):
        low = line.lower()
        for sig in LINES:
            if sig.needle not in low or (m := sig.pattern.search(line)) is None:
                continue
            obs += [Observation(key, value, i, line) for key, value in sig.facts(m)]
            if sig.consume:  # only what the tool printed: "python 3.8 cuda release 11.3, V11.3.58" keeps its 3.8
                spans.setdefault(i, []).append(m.span())


WARNED = "gpu.warned."  # gpu.warned.<slot>.name / .cc: a GPU torch warned about (slot: its index, or its name)


def _warned(slot: str, name: str, cc: str, i: int, line: str) -> list[Observation]:
    return [Observation(f"{WARNED}{slot}.name", name, i, line), Observation(f"{WARNED}{slot}.cc", cc, i, line)]


def _torch_warnings(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """The capability warning (GPU name and capability, then torch's arch list) and the too-old-GPU one ("Found
    GPU1 Tesla P100-PCIE-16GB which is of cuda capability 6.0"): one per GPU torch warned about."""
    names = [m.group("name") for line in lines if (m := _USE_GPU.search(line))]
    for i, line in enumerate(lines):
        found = _gpu_warning(line, i, names)
        if m := _ARCHS.search(line):
            found.append(Observation("torch.arch_list", m.group("archs").split(), i, line))
        obs += found
        if found or _USE_GPU.search(line):
            used.add(i)


def _gpu_warning(line: str, i: int, names: list[str]) -> list[Observation]:
    """The GPU one capability or too-old-GPU warning names; `names`: the GPUs the "use the GPU" lines name."""
    if m := _CAPABILITY.search(line):
        before = _gpu_name(line[max(0, m.start() - 80):m.start()])
        name = before if len(set(names)) > 1 or not names else names[0]
        return _warned(f"name:{name.lower()}", name, _cc(m.group("cc")), i, line)
    if m := _OLD_GPU.search(line):
        return _warned(m.group("i"), m.group("name").strip(), m.group("cc"), i, line)
    return []


def _two_lines(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """Messages a log wraps over two lines: cpp_extension's "detected CUDA version (12.2) mismatches ... compile
    \\n PyTorch (11.7)"."""
    for i, line in enumerate(lines):
        if "detected CUDA version" not in line:
            continue
        pair = line + " " + (lines[i + 1].strip() if i + 1 < len(lines) else "")
        if m := _DETECTED.search(pair):
            obs += [Observation(k, v, i, line) for k, v in _mismatch(m)]
            used.update((i, i + 1))


def _xformers(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """xformers' "built for" warning: its torch line ("PyTorch 2.3.0+cu121 with CUDA 1201 (you have 2.1.0+cu121)")
    says both torches, with or without the header above it (a paste often starts below it); its Python line
    ("Python 3.11.9 (you have 3.11.8)") next to either."""
    anchors = [i for i, line in enumerate(lines) if _XFORMERS.search(line)
               or ("you have" in line and _XF_TORCH.search(line))]
    for i in anchors:
        used.add(i)
        for j in range(max(0, i - 3), min(i + 4, len(lines))):
            found = _you_have(lines[j], j) if "you have" in lines[j] else []
            obs += found
            used.update([j] if found else [])


def _you_have(line: str, j: int) -> list[Observation]:
    """What one of xformers' "(you have ...)" lines says: the torch it was built for and this one, or Python's."""
    if m := _XF_TORCH.search(line):
        return [Observation("xformers.built_for_torch", m.group(1), j, line),
                Observation("torch.version", m.group(2), j, line),
                Observation("xformers.torch_seen", m.group(2), j, line)]
    if m := _XF_PYTHON.search(line):
        return [Observation("python.version", m.group(2), j, line)]
    return []


def _import_errors(lines: list[str], obs: list[Observation], used: set[int]) -> None:
    """`import flash_attn` failing on a symbol or library its binary needs: that package does not load."""
    for i, line in enumerate(lines):
        if not (imp := _IMPORT.search(line)):
            continue
        # the binary's path (Linux), or the module Windows names ("DLL load failed while importing flash_attn_2_cuda")
        module = imp.group("dll") if imp.group("dll") in _PACKAGE_OF_MODULE else None
        if module is None and (m := _BINARY_OF.search(line)):
            module = m.group("mod")
        if module is None and ("ImportError" in line or "OSError" in line):
            module = _importing(lines, i)
        if module is None:
            continue
        package = _PACKAGE_OF_MODULE[module]
        message = " ".join(line.split())[:300]
        if package == "torch":
            obs.append(Observation("torch.import_error", message, i, line))
        else:
            obs += [Observation(f"{package}.import_ok", False, i, line),
                    Observation(f"{package}.import_error", message, i, line)]
        used.add(i)


# a traceback's last frame: the import statement that raised ("    import flash_attn_2_cuda as flash_attn_cuda")
_IMPORT_LINE = re.compile(r"^\s{0,12}(?:import (?P<a>\w{1,60})|from (?P<b>\w{1,60})[\w.]{0,80} import)\b")


# a traceback frame in a package's own file: 'File "/env/site-packages/torch/__init__.py", line 300'
_FRAME = re.compile(r'^\s{0,8}File "[^"\n]{0,400}[/\\](?:site|dist)-packages[/\\](?P<mod>\w{1,60})[/\\.]')


def _importing(lines: list[str], i: int) -> str | None:
    """The module whose import raised the error on line i, when the message names no binary ("ImportError:
    libcudart.so.12: cannot open shared object file"): the import statement a traceback shows just above it, or
    the package whose own file the traceback's last frame is in (torch/__init__.py loading its CUDA libraries)."""
    for j in range(i - 1, max(-1, i - 3), -1):
        if (m := _IMPORT_LINE.match(lines[j])) and (mod := m.group("a") or m.group("b")) in _PACKAGE_OF_MODULE:
            return mod
    for j in range(i - 1, max(-1, i - 8), -1):
        if m := _FRAME.match(lines[j]):
            return m.group("mod") if m.group("mod") in _PACKAGE_OF_MODULE else None
    return None


READERS: tuple[Callable[[list[str], list[Observation], set[int]], None], ...] = (
    _torch_warnings, _two_lines, _xformers, _import_errors, tool_outputs.unsloth, tool_outputs.torch_build_flags,
    tool_outputs.cuda_start_errors, tool_outputs.smi_query_csv, tool_outputs.framework_label,
    tool_outputs.pip_show_torch, tool_outputs.proc_driver_version, tool_outputs.lightning_cuda,
    tool_outputs.gpu_tool_lines, tool_outputs.stated_outputs)


def read(lines: list[str]) -> tuple[list[Observation], set[int], Spans]:
    """Observations of every tool output in the lines, the lines they consumed whole, and the parts of lines
    (line index -> (start, end)) a one-line signature consumed."""
    obs: list[Observation] = []
    used: set[int] = set()
    spans: Spans = {}
    _lines(lines, obs, spans)
    for reader in READERS:
        reader(lines, obs, used)
    return obs, used, spans
