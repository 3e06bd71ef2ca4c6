"""GPU health facts: ECC errors, retired pages and remapped rows, clock-throttle reasons, temperature and power
against their limits, PCIe link against its maximum, NVLink link states.

NVML through pynvml first (microseconds per query, no subprocess); `nvidia-smi --query-gpu` as the fallback.
Without an NVIDIA driver the probe returns at once with no facts, so `check` costs nothing more on a CPU box.
Every query is separate: a GPU or driver that does not support one (ECC on a GeForce card, remapped rows before
Ampere) leaves that fact None and the rules that need it quiet.
"""

from __future__ import annotations

import re
from typing import Any

from olmo_doctor.facts import Facts
from olmo_doctor.isolation import which
from olmo_doctor.probes.gpu import driver_present
from olmo_doctor.run import Runner

# nvmlClocksEventReasons bit -> the name the throttle_reasons fact lists (nvml.h, "ClocksEventReasons")
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (Hopper has 18)


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def _try(fn: Any, *args: Any) -> Any:
    """One NVML query; None when the GPU or driver does not support it (NVMLError_NotSupported, ...)."""
    try:
        return fn(*args)
    except Exception:
        return None


def _ecc(nv: Any, h: Any, p: str) -> Facts:
    """Uncorrected ECC errors since the driver loaded and over the GPU's life; pages retired for them."""
    unc = getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    ecc = nv.nvmlDeviceGetTotalEccErrors
    pages = _try(nv.nvmlDeviceGetRetiredPages, h, getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    pending = _try(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
    return {
        p + "ecc.volatile_uncorrected": _try(ecc, h, unc, getattr(nv, "NVML_VOLATILE_ECC", 0)),
        p + "ecc.aggregate_uncorrected": _try(ecc, h, unc, getattr(nv, "NVML_AGGREGATE_ECC", 1)),
        p + "retired_pages.double_bit": len(pages) if isinstance(pages, (list, tuple)) else None,
        p + "retired_pages.pending": bool(pending) if pending is not None else None,
    }


def _remapped(nv: Any, h: Any, p: str) -> Facts:
    rows = _try(nv.nvmlDeviceGetRemappedRows, h)  # (correctable, uncorrectable, pending, failure), Ampere+
    if not (isinstance(rows, (list, tuple)) and len(rows) >= 4):
        return {}
    return {p + "remapped_rows.uncorrectable": int(rows[1]), p + "remapped_rows.pending": bool(rows[2]),
            p + "remapped_rows.failed": bool(rows[3])}


def _clocks(nv: Any, h: Any, p: str) -> Facts:
    """Why the clocks are held back, and the temperature against the slowdown threshold."""
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    mask = _try(reasons, h) if reasons else None
    return {
        p + "throttle_reasons": throttle_names(int(mask)) if isinstance(mask, int) else None,
        p + "temperature_c": _try(nv.nvmlDeviceGetTemperature, h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
        p + "temperature_slowdown_c": _try(
            nv.nvmlDeviceGetTemperatureThreshold, h, getattr(nv, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)),
    }


_POWER = (("power_w", "nvmlDeviceGetPowerUsage"), ("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit"),
          ("power_default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit"))


def _power(nv: Any, h: Any, p: str) -> Facts:
    """Power drawn and its limits, in watts (NVML answers in milliwatts)."""
    f: Facts = {}
    for key, fn in _POWER:
        mw = _try(getattr(nv, fn, None), h) if hasattr(nv, fn) else None
        f[p + key] = round(mw / 1000, 1) if isinstance(mw, (int, float)) else None
    return f


def _pcie(nv: Any, h: Any, p: str) -> Facts:
    gpu_max = getattr(nv, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None)
    return {
        p + "pcie.gen": _try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        p + "pcie.gen_max": _try(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        p + "pcie.gen_gpu_max": _try(gpu_max, h) if gpu_max else None,
        p + "pcie.width": _try(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        p + "pcie.width_max": _try(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
    }


def _gpu_nvml(nv: Any, h: Any, i: int) -> Facts:
    f: Facts = {}
    for part in (_ecc, _remapped, _clocks, _power, _pcie):
        f.update(part(nv, h, f"gpu.{i}."))
    f.update(_nvlinks(nv, h, i))
    return f


def _nvlinks(nv: Any, h: Any, i: int) -> Facts:
    """Per-link state for the links this GPU has (a link NVML reports as not supported does not exist)."""
    f: Facts = {}
    up = down = 0
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS)):
        state = _try(nv.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            continue
        is_up = int(state) == getattr(nv, "NVML_FEATURE_ENABLED", 1)
        f[f"gpu.{i}.nvlink.{link}.state"] = "up" if is_up else "down"
        up, down = up + is_up, down + (not is_up)
    if up or down:
        f[f"gpu.{i}.nvlink.up"], f[f"gpu.{i}.nvlink.down"] = up, down
    return f


def nvml_health(nv: Any) -> Facts | None:
    """Health facts through an NVML binding module (pynvml, or a fake in tests); None when NVML is unusable."""
    try:
        nv.nvmlInit()
    except Exception:
        return None
    try:
        facts: Facts = {"gpu.health_source": "pynvml"}
        for i in range(nv.nvmlDeviceGetCount()):
            h = _try(nv.nvmlDeviceGetHandleByIndex, i)
            if h is not None:
                facts.update(_gpu_nvml(nv, h, i))
        return facts
    except Exception:
        return None
    finally:
        _try(nv.nvmlShutdown)


# nvidia-smi fallback: one query, fields in this order (clocks_event_reasons is the newer name of
# clocks_throttle_reasons; older drivers only know the latter, so both are tried)
SMI_FIELDS = [
    ("ecc.errors.uncorrected.volatile.total", "ecc.volatile_uncorrected", int),
    ("ecc.errors.uncorrected.aggregate.total", "ecc.aggregate_uncorrected", int),
    ("retired_pages.pending", "retired_pages.pending", bool),
    ("temperature.gpu", "temperature_c", int),
    ("power.draw", "power_w", float),
    ("power.limit", "power_limit_w", float),
    ("power.default_limit", "power_default_limit_w", float),
    ("pcie.link.gen.current", "pcie.gen", int),
    ("pcie.link.gen.max", "pcie.gen_max", int),
    ("pcie.link.width.current", "pcie.width", int),
    ("pcie.link.width.max", "pcie.width_max", int),
]
SMI_REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


def _smi_value(text: str, kind: type) -> Any:
    text = text.strip()
    if not text or text.startswith("[") or text.lower() in ("n/a", "not supported"):
        return None
    if kind is bool:
        return text.lower() in ("yes", "true", "1")
    try:
        return kind(float(text)) if kind is int else kind(text)
    except ValueError:
        return None


def smi_health(run: Runner) -> Facts | None:
    """The same facts from `nvidia-smi --query-gpu` (no remapped rows or NVLink states: NVML only)."""
    for reasons in SMI_REASONS:
        names = [f for f, _, _ in SMI_FIELDS] + [reasons]
        out = run(["nvidia-smi", f"--query-gpu={','.join(names)}", "--format=csv,noheader,nounits"])
        if out.ok:
            break
    else:
        return None
    facts: Facts = {"gpu.health_source": "nvidia-smi"}
    for i, row in enumerate(r for r in out.stdout.splitlines() if r.strip()):
        cols = row.split(",")
        if len(cols) == len(SMI_FIELDS) + 1:
            facts.update(_smi_row(i, cols))
    return facts


def _smi_row(i: int, cols: list[str]) -> Facts:
    """GPU i's health facts from its row: the SMI_FIELDS, then the throttle reasons bit mask."""
    facts: Facts = {f"gpu.{i}.{key}": _smi_value(text, kind)
                    for (_, key, kind), text in zip(SMI_FIELDS, cols, strict=False)}
    m = re.fullmatch(r"\s*0x([0-9a-fA-F]+)\s*", cols[-1])
    facts[f"gpu.{i}.throttle_reasons"] = throttle_names(int(m.group(1), 16)) if m else None
    return facts


def probe(run: Runner, use_nvml: bool = True) -> Facts:
    if not driver_present() and which("nvidia-smi") is None:
        return {}  # a CPU machine: nothing to ask, and no time spent asking
    facts = None
    if use_nvml:
        try:
            import pynvml
        except ImportError:
            pynvml = None
        facts = nvml_health(pynvml) if pynvml is not None else None
    return facts or smi_health(run) or {}
