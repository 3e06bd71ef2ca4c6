"""Text and JSON output for check-like results: a calm one-line-per-area summary, then each finding with what,
why, and the exact fix, then the recommended environment."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from rich.markup import escape

from olmo_doctor.api import CheckResult
from olmo_doctor.compat.kernels import FLOAT8_MIN_CC, torchao_for_torch
from olmo_doctor.compat.release import major_minor
from olmo_doctor.facts import FACT_KEYS, FactValue, gpu_indices, is_unknown, with_defaults
from olmo_doctor.findings import Finding, consequences, roots
from olmo_doctor.loader_errors import LABELS, classify
from olmo_doctor.rules.causes import AREAS
from olmo_doctor.rules.model import cause_areas
from olmo_doctor.shell import CONTROL, SURROGATE

MARK = {"ok": "[green]✓[/]", "error": "[red]✗[/]", "warning": "[yellow]![/]", "info": "[blue]•[/]",
        "unknown": "[dim]?[/]"}
PLAIN_MARK = {"ok": "✓", "error": "✗", "warning": "!", "info": "•", "unknown": "?"}


def plain(text: str) -> str:
    """Text from outside (a log line, a report value, a file name) as rich markup that prints exactly as written.

    Brackets are escaped (`[/]` would crash the printer, `[link=...]` hide a link) and every control character
    but newline and tab shows as `?`: ESC, the 8-bit CSI U+009B, CR and the bidirectional overrides make a
    terminal run a sequence or show text other than what the input holds, whatever is left after ANSI colours
    were stripped. A lone surrogate (a byte of a path or value that is not UTF-8) shows as \\xNN, naming the
    byte, since no encoding can print it."""
    text = SURROGATE.sub(lambda m: f"\\x{ord(m[0]) - 0xDC00:02x}" if "\udc80" <= m[0] <= "\udcff" else "?",
                         text)
    return escape(CONTROL.sub(lambda m: m[0] if m[0] in "\n\t" else "?", text))


def _v(facts: Mapping[str, FactValue], key: str, absent: str = "?") -> str:
    """The value, `absent` when known to be absent, and always `?` when not known (a report did not say)."""
    value = facts.get(key)
    if is_unknown(facts, key):
        return "?"
    return absent if value is None else str(value)


def _capabilities(f: Mapping[str, FactValue]) -> dict[int, tuple[int, int]] | None:
    """Each GPU's compute capability; None without a GPU or with one of unknown capability (nothing to say of the
    hardware then)."""
    ccs = {i: major_minor(f.get(f"gpu.{i}.compute_capability")) for i in gpu_indices(f)}
    known = {i: cc for i, cc in ccs.items() if cc is not None}
    return known if ccs and len(known) == len(ccs) else None


def _no_tensor_cores(f: Mapping[str, FactValue], gpu: int, version: FactValue) -> str:
    name, cc = _v(f, f"gpu.{gpu}.name"), _v(f, f"gpu.{gpu}.compute_capability")
    have = f"torchao {version}, but " if version else ""
    return f"float8: {have}no float8 tensor cores on {name} (cc {cc})"


def _float8_install(f: Mapping[str, FactValue], installed: str | None) -> str:
    """The float8 item where every GPU has float8 tensor cores: the torchao to install, or whether it is ready."""
    if installed is None:
        requirement = torchao_for_torch(f.get("torch.version")) or "torchao"
        pin = requirement if "==" in requirement else "torchao"  # a range (>=0.17.0) means the latest fits
        return f"float8: torchao not installed (pip install {pin} for precision fp8)"
    ready = f.get("torchao.import_ok") is True and f.get("torch.cuda_available") is not False
    return f"float8: {installed}" + (" (precision fp8 ready)" if ready else "")


def float8_item(f: Mapping[str, FactValue]) -> str:
    """The Kernels line's float8 item: can `precision: fp8` (torchao's Float8Linear) run here? Readiness needs
    torchao.float8 importing against this torch and every GPU with float8 tensor cores; without a GPU (or when a
    report did not say which) only the install is named."""
    version = f.get("torchao.version")
    installed = f"torchao {version}" if version else "torchao ?" if is_unknown(f, "torchao.version") else None
    if version and f.get("torchao.import_ok") is False:
        return f"float8: {installed} does not load against this torch"
    ccs = _capabilities(f)
    if ccs is None:
        return f"float8: {installed or 'torchao not installed'}"
    oldest = min(ccs, key=lambda i: ccs[i])
    if ccs[oldest] < FLOAT8_MIN_CC:
        return _no_tensor_cores(f, oldest, version)
    return _float8_install(f, installed)


def _driver(f: Mapping[str, FactValue]) -> str:
    return f"; driver {_v(f, 'driver.version')} (CUDA {_v(f, 'driver.cuda_version')})"


def _gpu_line(f: Mapping[str, FactValue]) -> str:
    gpus = [f"{_v(f, f'gpu.{i}.name')} (cc {_v(f, f'gpu.{i}.compute_capability')}, "
            f"{_v(f, f'gpu.{i}.memory_gb')} GB)" for i in gpu_indices(f)]
    if gpus:
        return ", ".join(f"{g} ×{gpus.count(g)}" if gpus.count(g) > 1 else g for g in sorted(set(gpus))) + _driver(f)
    gpu = "no NVIDIA GPU visible" if f.get("gpu.count") == 0 else "?"
    return gpu + (_driver(f) if f.get("driver.version") else "")


def _cuda_line(f: Mapping[str, FactValue]) -> str:
    if f.get("nvcc.version"):
        return (f"nvcc {_v(f, 'nvcc.full_version', _v(f, 'nvcc.version'))} at {_v(f, 'nvcc.path')}, "
                f"accepts gcc <= {_v(f, 'nvcc.max_gcc')}; CUDA_HOME {_v(f, 'cuda.home', 'unset')}")
    return "nvcc ?, CUDA_HOME ?" if is_unknown(f, "nvcc.version") else "no nvcc found (needed only to build kernels)"


def _torch_build(f: Mapping[str, FactValue]) -> str:
    """CUDA x.y, ROCm build or CPU build, then cuDNN and NCCL where torch has them."""
    if is_unknown(f, "torch.cuda"):
        bits = ["CUDA ?"]
    elif f.get("torch.cuda"):
        bits = [f"CUDA {f['torch.cuda']}"]
    else:
        bits = ["ROCm build" if "rocm" in str(f["torch.version"]).lower() else "CPU build"]
    bits += [f"{label} {f[key]}" for key, label in (("torch.cudnn", "cuDNN"), ("torch.nccl", "NCCL")) if f.get(key)]
    return ", ".join(bits)


def _torch_line(f: Mapping[str, FactValue]) -> str:
    if not f.get("torch.version"):
        return "?" if is_unknown(f, "torch.version") else "not installed"
    avail = f.get("torch.cuda_available")
    torch = f"{f['torch.version']} ({_torch_build(f)})" + (
        ", CUDA available" if avail else ", CUDA not available" if avail is False else "")
    if f.get("torch.import_error"):
        torch += f"; import fails: {f['torch.import_error']}"
    return torch


KERNELS = (("flash_attn", "flash-attn"), ("flash_attn_3", "flash-attn-3"), ("xformers", "xformers"))
# what `auto` says when a kernel is installed but not what it picks
_AUTO_NOTE = {"sdpa": "auto: no built kernel beat SDPA here",
              "timed": "auto: times them at the first train (no build-kernels record here)"}


def _kernel_item(f: Mapping[str, FactValue], key: str, label: str) -> str:
    version = f.get(f"{key}.version")
    if not version:
        return f"{label} ?" if is_unknown(f, f"{key}.version") else f"{label} not installed"
    note = "; ".join(n for n in (_load_note(f, key), _pick_note(f, label)) if n)
    return f"{label} {version}" + (f" ({note})" if note else "")


def _load_note(f: Mapping[str, FactValue], key: str) -> str:
    """Whether the kernel loads, or the kind of failure when it does not ("" when not tried)."""
    ok = f.get(f"{key}.import_ok")
    if ok is False:
        return LABELS[classify(f.get(f"{key}.import_error")) or "other"]
    return "loads" if ok else ""


def _pick_note(f: Mapping[str, FactValue], label: str) -> str:
    return "auto picks it" if f.get("attention.auto_pick") == label else ""


def _kernels_line(f: Mapping[str, FactValue]) -> str:
    kernels = [_kernel_item(f, key, label) for key, label in KERNELS]
    auto_note = _AUTO_NOTE.get(str(f.get("attention.auto_pick")))
    if auto_note and any(f.get(f"{k}.version") for k, _ in KERNELS):
        kernels.append(auto_note)
    kernels.append(float8_item(f))
    return ", ".join(kernels)


def _machine_line(f: Mapping[str, FactValue]) -> str:
    nofile = "unlimited" if f.get("ulimit.nofile.soft") == -1 else _v(f, "ulimit.nofile.soft")
    return (f"{_v(f, 'cpu.count')} CPUs, {_v(f, 'mem.available_gb')}/{_v(f, 'mem.total_gb')} GB RAM free, "
            f"/dev/shm {_v(f, 'shm.size_gb')} GB, disk {_v(f, 'disk.free_gb')} GB free, nofile {nofile}"
            + (", WSL2" if f.get("os.wsl") else "")
            + (f", in {f['os.container']}" if f.get("os.container") else ""))


# One human line per area, built from facts alone, in the order `check` prints them.
AREA_LINES: dict[str, Callable[[Mapping[str, FactValue]], str]] = {
    "GPU": _gpu_line,
    "CUDA": _cuda_line,
    "Compiler": lambda f: f"g++ {_v(f, 'gcc.version')}" + (f" ({f['gcc.path']})" if f.get("gcc.path") else ""),
    "C libraries": lambda f: (f"glibc {_v(f, 'glibc.version')}, libstdc++ up to "
                              f"GLIBCXX_{_v(f, 'libstdcxx.glibcxx_max')}"),
    "Machine": _machine_line,
    "Python": lambda f: (f"{_v(f, 'python.version')}, pip {_v(f, 'pip.version')}, setuptools "
                         f"{_v(f, 'setuptools.version')}, ninja {_v(f, 'ninja.version', 'missing')}"),
    "torch": _torch_line,
    "Kernels": _kernels_line,
}


def area_lines(facts: Mapping[str, FactValue]) -> dict[str, str]:
    """One human line per area, built from facts alone."""
    return {area: line(facts) for area, line in AREA_LINES.items()}


# The facts an area's line is about: when a report states none of them, the area is unknown, not fine.
AREA_FACTS: dict[str, tuple[str, ...]] = {
    "GPU": ("gpu.count",), "CUDA": ("nvcc.version",), "Compiler": ("gcc.version",), "C libraries": ("glibc.version",),
    "Machine": ("cpu.count", "mem.total_gb"), "Python": ("python.version",), "torch": ("torch.version",),
    "Kernels": ("flash_attn.version", "xformers.version", "torchao.version"),
}


def area_status(findings: list[Finding], facts: Mapping[str, FactValue] | None = None) -> dict[str, str]:
    """Worst severity per area; `unknown` for a clean area whose facts a report did not state."""
    status = {a: "ok" for a in AREAS}
    if facts is not None:
        status.update({a: "unknown" for a in _unstated_areas(facts)})
    area_of = cause_areas()
    for finding in findings:
        area = area_of.get(finding.cause, "Machine")  # only a finding made outside the rules lacks a cause row
        if _RANK[finding.severity] < _RANK[status[area]]:
            status[area] = finding.severity
    return status


# worst first: an area shows the worst of its findings
_RANK = {"ok": 4, "unknown": 3, "info": 2, "warning": 1, "error": 0}


def _unstated_areas(facts: Mapping[str, FactValue]) -> list[str]:
    """Areas none of whose facts the report stated."""
    return [a for a, keys in AREA_FACTS.items() if all(is_unknown(facts, k) for k in keys)]


def not_judged_line(groups: Mapping[str, list[str]], shown: int = 4) -> str:
    """'nvcc (not stated): OD110, OD111 ...; glibc (not stated): OD165' from not_judged's fact -> codes."""
    families: dict[str, list[str]] = {}
    for key, codes in groups.items():
        listed = families.setdefault(key.split(".")[0], [])
        listed += [c for c in codes if c not in listed]
    parts = []
    for family, all_codes in families.items():
        more = f" +{len(all_codes) - shown}" if len(all_codes) > shown else ""
        parts.append(f"{family} (not stated): {', '.join(sorted(all_codes)[:shown])}{more}")
    return "; ".join(parts)


def unknown_keys(facts: Mapping[str, FactValue]) -> list[str]:
    """Documented keys these facts do not know (a report did not state them); empty for probed facts."""
    keys = [k for k in FACT_KEYS if ".N." not in k]
    keys += [k.replace(".N.", f".{i}.") for i in gpu_indices(facts) for k in FACT_KEYS if ".N." in k]
    return sorted(k for k in keys if is_unknown(facts, k))


def to_json(result: CheckResult) -> dict[str, Any]:
    # probed facts list every key (null = probed and absent); a report's list only what it stated, and name the
    # rest under "unknown", so null never stands for "not known"
    return {
        "facts": with_defaults(result.facts),
        "unknown": unknown_keys(result.facts),
        # a finding that follows from another is listed under it ("consequences"), not beside it
        "findings": [{**f.to_json(), "consequences": [c.to_json() for c in consequences(result.findings, f)]}
                     for f in roots(result.findings)],
        "env": {name: var.value for name, var in result.env.items()},
        "elapsed_s": round(result.elapsed_s, 4),
        # a report only: the line each fact was read from, and the rules that could not judge for lack of a fact
        **{k: result.extra[k] for k in ("sources", "not_judged") if k in result.extra},
    }


def dumps(result: CheckResult) -> str:
    return json.dumps(to_json(result), indent=2, sort_keys=False, default=str)


def finding_block(finding: Finding, index: int | None = None) -> list[str]:
    """Rich-markup lines for one finding: title, message, why, and fixes with their grade.

    Titles and messages carry fact values (a GPU name, a path from a report), so every text is escaped: a value
    like `[/]` or `[link=...]` prints as written instead of crashing the printer or hiding a link."""
    head = f"{MARK[finding.severity]} [bold]{finding.code}[/] {plain(finding.title)}"
    lines = [head, f"    {plain(finding.message)}"]
    if finding.why:
        lines.append(f"    [dim]why: {plain(' '.join(finding.why.split()))}[/]")
    for fix in finding.fixes:
        lines += _fix_lines(fix)
    return lines


# how a fix is applied, as `check` says it
_GRADES = {
    "safe": "[green]olmo-doctor fix --apply does this[/]",
    "unsafe": "[yellow]olmo-doctor fix --apply --unsafe-fixes does this[/]",
    "manual": "[dim]manual[/]",
}


def _fix_lines(fix: Any) -> list[str]:
    """A fix's title with its grade, then its commands; nothing for a manual fix that says nothing."""
    if not fix.commands and fix.applicability == "manual" and not fix.title:
        return []
    grade = _GRADES[fix.applicability if fix.automatic or fix.applicability == "manual" else "manual"]
    return [f"    fix: {plain(fix.title)} ({grade})", *(f"      [cyan]$ {plain(cmd)}[/]" for cmd in fix.commands)]
