"""Text and JSON output for check-like results: a calm one-line-per-area summary, then each finding with what,
why, and the exact fix, then the recommended environment."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from olmo_doctor.api import CheckResult
from olmo_doctor.facts import FactValue, gpu_indices, with_defaults
from olmo_doctor.findings import Finding

MARK = {"ok": "[green]✓[/]", "error": "[red]✗[/]", "warning": "[yellow]![/]", "info": "[blue]•[/]"}
PLAIN_MARK = {"ok": "✓", "error": "✗", "warning": "!", "info": "•"}

# Which summary line a cause belongs to.
AREA_OF_CAUSE: dict[str, str] = {
    "no_gpu": "GPU", "driver_too_old": "GPU", "gpu_arch_unsupported": "GPU", "nccl_p2p": "GPU",
    "cuda_home_missing": "CUDA", "cuda_version_mismatch": "CUDA", "nvcc_too_old": "CUDA",
    "nvcc_too_old_for_arch": "CUDA", "nvcc_dropped_old_arch": "CUDA", "glibc_cuda_headers": "CUDA",
    "unsupported_gcc": "Compiler", "glibc_or_glibcxx_missing": "C libraries",
    "compile_oom_killed": "Machine", "disk_space": "Machine", "ulimit_nofile": "Machine", "nccl_shm": "Machine",
    "memlock_limit": "Machine", "nccl_wsl": "Machine", "nccl_config": "Machine",
    "python_version": "Python", "setuptools_pip": "Python", "ninja_missing": "Python",
    "build_isolation_no_torch": "Python", "shadowed_module": "Python",
    "torch_cpu_build": "torch", "no_kernel_image_arch_list": "torch", "out_of_memory_training": "torch",
    "abi_undefined_symbol": "Kernels", "xformers_torch_pin_conflict": "Kernels", "xformers_no_cuda_build": "Kernels",
}
AREAS = ["GPU", "CUDA", "Compiler", "C libraries", "Machine", "Python", "torch", "Kernels"]


def _v(facts: Mapping[str, FactValue], key: str, unknown: str = "?") -> str:
    value = facts.get(key)
    return unknown if value is None else str(value)


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
        gpu = "no NVIDIA GPU visible" if f.get("gpu.count") == 0 else "unknown"
    cuda = (f"nvcc {_v(f, 'nvcc.full_version', _v(f, 'nvcc.version'))} at {_v(f, 'nvcc.path')}, "
            f"accepts gcc <= {_v(f, 'nvcc.max_gcc')}; CUDA_HOME {_v(f, 'cuda.home', 'unset')}"
            if f.get("nvcc.version") else "no nvcc found (needed only to build kernels)")
    torch = "not installed"
    if f.get("torch.version"):
        bits = [f"CUDA {_v(f, 'torch.cuda')}" if f.get("torch.cuda") else "CPU build"]
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
        kernels.append(f"{label} {version}" + (f" ({note})" if note else "") if version else f"{label} not installed")
    if pick == "sdpa" and any(f.get(f"{k}.version") for k in ("flash_attn", "flash_attn_3", "xformers")):
        kernels.append("auto: no built kernel beat SDPA here")
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


def area_status(findings: list[Finding]) -> dict[str, str]:
    status = {a: "ok" for a in AREAS}
    rank = {"ok": 3, "info": 2, "warning": 1, "error": 0}
    for finding in findings:
        area = AREA_OF_CAUSE.get(finding.cause, "Machine")
        if rank[finding.severity] < rank[status[area]]:
            status[area] = finding.severity
    return status


def to_json(result: CheckResult) -> dict[str, Any]:
    return {
        "facts": with_defaults(result.facts),
        "findings": [f.to_json() for f in result.findings],
        "env": {name: var.value for name, var in result.env.items()},
        "elapsed_s": round(result.elapsed_s, 4),
    }


def dumps(result: CheckResult) -> str:
    return json.dumps(to_json(result), indent=2, sort_keys=False, default=str)


def finding_block(finding: Finding, index: int | None = None) -> list[str]:
    """Rich-markup lines for one finding: title, message, why, and fixes with their grade."""
    head = f"{MARK[finding.severity]} [bold]{finding.code}[/] {finding.title}"
    lines = [head, f"    {finding.message}"]
    if finding.why:
        lines.append(f"    [dim]why: {' '.join(finding.why.split())}[/]")
    for fix in finding.fixes:
        if not fix.commands and fix.applicability == "manual" and not fix.title:
            continue
        grade = {
            "safe": "[green]olmo-doctor fix --apply does this[/]",
            "unsafe": "[yellow]olmo-doctor fix --apply --unsafe-fixes does this[/]",
            "manual": "[dim]manual[/]",
        }[fix.applicability if fix.automatic or fix.applicability == "manual" else "manual"]
        lines.append(f"    fix: {fix.title} ({grade})")
        lines += [f"      [cyan]$ {cmd}[/]" for cmd in fix.commands]
    return lines
