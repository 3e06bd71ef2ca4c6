"""Text and JSON output for check-like results: a calm one-line-per-area summary, then each finding with what,
why, and the exact fix, then the recommended environment."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.markup import escape

from olmo_doctor.api import CheckResult
from olmo_doctor.facts import FACT_KEYS, FactValue, gpu_indices, is_unknown, with_defaults
from olmo_doctor.findings import Finding, consequences, roots
from olmo_doctor.rules.causes import AREAS
from olmo_doctor.rules.model import cause_areas
from olmo_doctor.shell import CONTROL
from olmo_doctor.tables import FLOAT8_MIN_CC, torchao_for_torch
from olmo_doctor.versions import major_minor

MARK = {"ok": "[green]✓[/]", "error": "[red]✗[/]", "warning": "[yellow]![/]", "info": "[blue]•[/]",
        "unknown": "[dim]?[/]"}
PLAIN_MARK = {"ok": "✓", "error": "✗", "warning": "!", "info": "•", "unknown": "?"}


def plain(text: str) -> str:
    """Text from outside (a log line, a report value, a file name) as rich markup that prints exactly as written.

    Brackets are escaped (`[/]` would crash the printer, `[link=...]` hide a link) and every control character
    but newline and tab shows as `?`: ESC, the 8-bit CSI U+009B, CR and the bidirectional overrides make a
    terminal run a sequence or show text other than what the input holds, whatever is left after ANSI colours
    were stripped."""
    return escape(CONTROL.sub(lambda m: m[0] if m[0] in "\n\t" else "?", text))


def _v(facts: Mapping[str, FactValue], key: str, absent: str = "?") -> str:
    """The value, `absent` when known to be absent, and always `?` when not known (a report did not say)."""
    value = facts.get(key)
    if is_unknown(facts, key):
        return "?"
    return absent if value is None else str(value)


def float8_item(f: Mapping[str, FactValue]) -> str:
    """The Kernels line's float8 item: can `precision: fp8` (torchao's Float8Linear) run here? Readiness needs
    torchao.float8 importing against this torch and every GPU with float8 tensor cores; without a GPU (or when a
    report did not say which) only the install is named."""
    version = f.get("torchao.version")
    installed = f"torchao {version}" if version else "torchao ?" if is_unknown(f, "torchao.version") else None
    if version and f.get("torchao.import_ok") is False:
        return f"float8: {installed} does not load against this torch"
    ccs = {i: major_minor(f.get(f"gpu.{i}.compute_capability")) for i in gpu_indices(f)}
    known = {i: cc for i, cc in ccs.items() if cc is not None}
    if not ccs or len(known) < len(ccs):  # no GPU, or one of unknown capability: nothing to say of the hardware
        return f"float8: {installed or 'torchao not installed'}"
    oldest = min(known, key=lambda i: known[i])
    if known[oldest] < FLOAT8_MIN_CC:
        name, cc = _v(f, f"gpu.{oldest}.name"), _v(f, f"gpu.{oldest}.compute_capability")
        have = f"torchao {version}, but " if version else ""
        return f"float8: {have}no float8 tensor cores on {name} (cc {cc})"
    if installed is None:
        requirement = torchao_for_torch(f.get("torch.version")) or "torchao"
        pin = requirement if "==" in requirement else "torchao"  # a range (>=0.17.0) means the latest fits
        return f"float8: torchao not installed (pip install {pin} for precision fp8)"
    ready = f.get("torchao.import_ok") is True and f.get("torch.cuda_available") is not False
    return f"float8: {installed}" + (" (precision fp8 ready)" if ready else "")


def area_lines(facts: Mapping[str, FactValue]) -> dict[str, str]:
    """One human line per area, built from facts alone."""
    f = facts
    gpus = [f"{_v(f, f'gpu.{i}.name')} (cc {_v(f, f'gpu.{i}.compute_capability')}, "
            f"{_v(f, f'gpu.{i}.memory_gb')} GB)" for i in gpu_indices(f)]
    if gpus:
        uniq = sorted(set(gpus))
        gpu = ", ".join(f"{g} ×{gpus.count(g)}" if gpus.count(g) > 1 else g for g in uniq)
        gpu += f"; driver {_v(f, 'driver.version')} (CUDA {_v(f, 'driver.cuda_version')})"
    else:
        gpu = "no NVIDIA GPU visible" if f.get("gpu.count") == 0 else "?"
        if f.get("driver.version"):
            gpu += f"; driver {_v(f, 'driver.version')} (CUDA {_v(f, 'driver.cuda_version')})"
    cuda = (f"nvcc {_v(f, 'nvcc.full_version', _v(f, 'nvcc.version'))} at {_v(f, 'nvcc.path')}, "
            f"accepts gcc <= {_v(f, 'nvcc.max_gcc')}; CUDA_HOME {_v(f, 'cuda.home', 'unset')}"
            if f.get("nvcc.version") else "nvcc ?, CUDA_HOME ?" if is_unknown(f, "nvcc.version")
            else "no nvcc found (needed only to build kernels)")
    torch = "?" if is_unknown(f, "torch.version") else "not installed"
    if f.get("torch.version"):
        cuda_bit = "CUDA ?" if is_unknown(f, "torch.cuda") else f"CUDA {f['torch.cuda']}" if f.get("torch.cuda") \
            else "ROCm build" if "rocm" in str(f["torch.version"]).lower() else "CPU build"
        bits = [cuda_bit]
        if f.get("torch.cudnn"):
            bits.append(f"cuDNN {f['torch.cudnn']}")
        if f.get("torch.nccl"):
            bits.append(f"NCCL {f['torch.nccl']}")
        avail = f.get("torch.cuda_available")
        torch = f"{f['torch.version']} ({', '.join(bits)})" + (
            ", CUDA available" if avail else ", CUDA not available" if avail is False else "")
        if f.get("torch.import_error"):
            torch += f"; import fails: {f['torch.import_error']}"
    kernels = []
    pick = f.get("attention.auto_pick")
    for key, label in (("flash_attn", "flash-attn"), ("flash_attn_3", "flash-attn-3"), ("xformers", "xformers")):
        version = f.get(f"{key}.version")
        ok = f.get(f"{key}.import_ok")
        notes = ["does not load against this torch" if ok is False else "loads" if ok else ""]
        notes.append("auto picks it" if pick == label else "")
        note = "; ".join(n for n in notes if n)
        kernels.append(f"{label} {version}" + (f" ({note})" if note else "") if version
                       else f"{label} ?" if is_unknown(f, f"{key}.version") else f"{label} not installed")
    if pick == "sdpa" and any(f.get(f"{k}.version") for k in ("flash_attn", "flash_attn_3", "xformers")):
        kernels.append("auto: no built kernel beat SDPA here")
    elif pick == "timed" and any(f.get(f"{k}.version") for k in ("flash_attn", "flash_attn_3", "xformers")):
        kernels.append("auto: times them at the first train (no build-kernels record here)")
    kernels.append(float8_item(f))
    nofile = f.get("ulimit.nofile.soft")
    return {
        "GPU": gpu,
        "CUDA": cuda,
        "Compiler": f"g++ {_v(f, 'gcc.version')}" + (f" ({f['gcc.path']})" if f.get("gcc.path") else ""),
        "C libraries": f"glibc {_v(f, 'glibc.version')}, libstdc++ up to GLIBCXX_{_v(f, 'libstdcxx.glibcxx_max')}",
        "Machine": (f"{_v(f, 'cpu.count')} CPUs, {_v(f, 'mem.available_gb')}/{_v(f, 'mem.total_gb')} GB RAM free, "
                    f"/dev/shm {_v(f, 'shm.size_gb')} GB, disk {_v(f, 'disk.free_gb')} GB free, nofile "
                    f"{'unlimited' if nofile == -1 else _v(f, 'ulimit.nofile.soft')}"
                    + (", WSL2" if f.get("os.wsl") else "")
                    + (f", in {f['os.container']}" if f.get("os.container") else "")),
        "Python": (f"{_v(f, 'python.version')}, pip {_v(f, 'pip.version')}, setuptools "
                   f"{_v(f, 'setuptools.version')}, ninja {_v(f, 'ninja.version', 'missing')}"),
        "torch": torch,
        "Kernels": ", ".join(kernels),
    }


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
        status.update({a: "unknown" for a, keys in AREA_FACTS.items() if all(is_unknown(facts, k) for k in keys)})
    rank = {"ok": 4, "unknown": 3, "info": 2, "warning": 1, "error": 0}
    area_of = cause_areas()
    for finding in findings:
        area = area_of.get(finding.cause, "Machine")  # only a finding made outside the rules lacks a cause row
        if rank[finding.severity] < rank[status[area]]:
            status[area] = finding.severity
    return status


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
        if not fix.commands and fix.applicability == "manual" and not fix.title:
            continue
        grade = {
            "safe": "[green]olmo-doctor fix --apply does this[/]",
            "unsafe": "[yellow]olmo-doctor fix --apply --unsafe-fixes does this[/]",
            "manual": "[dim]manual[/]",
        }[fix.applicability if fix.automatic or fix.applicability == "manual" else "manual"]
        lines.append(f"    fix: {plain(fix.title)} ({grade})")
        lines += [f"      [cyan]$ {plain(cmd)}[/]" for cmd in fix.commands]
    return lines
