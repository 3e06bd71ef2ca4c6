"""GPU and driver facts: NVML through pynvml first (no subprocess), `nvidia-smi` as the fallback."""

from __future__ import annotations

import os
import re
from typing import Any

from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.facts import Facts
from olmo_doctor.run import Result, Runner

SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=name,compute_cap,memory.total,pci.bus_id,driver_version",
    "--format=csv,noheader,nounits",
]

OLD_SMI_QUERY = [SMI_QUERY[0], "--query-gpu=name,memory.total,pci.bus_id,driver_version", SMI_QUERY[2]]


def _cuda_version_from_int(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _text(value: Any) -> Any:
    """NVML answers bytes in older bindings, str in newer ones."""
    return value.decode() if isinstance(value, bytes) else value


def _nvml_gpu(pynvml: Any, i: int) -> Facts:
    """GPU i's name, compute capability, memory and PCI bus id from NVML."""
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    name = pynvml.nvmlDeviceGetName(h)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    pci = pynvml.nvmlDeviceGetPciInfo(h)
    return {f"gpu.{i}.name": _text(name), f"gpu.{i}.compute_capability": f"{major}.{minor}",
            f"gpu.{i}.memory_gb": round(int(mem.total) / 1e9, 1), f"gpu.{i}.pci_bus_id": _text(pci.busId)}


def probe_nvml() -> Facts | None:
    """Facts from NVML, or None when the library or driver is absent."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable driver here
        return None
    try:
        facts: Facts = {"gpu.source": "pynvml"}
        drv = pynvml.nvmlSystemGetDriverVersion()
        facts["driver.version"] = _text(drv)
        facts["driver.cuda_version"] = _cuda_version_from_int(pynvml.nvmlSystemGetCudaDriverVersion())
        count = pynvml.nvmlDeviceGetCount()
        facts["gpu.count"] = count
        for i in range(count):
            facts.update(_nvml_gpu(pynvml, i))
        return facts
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _smi_rows(run: Runner) -> list[str] | None:
    """nvidia-smi's rows: name, compute capability, memory MiB, bus id, driver; None when it does not answer."""
    out = run(SMI_QUERY)
    if not out.ok:
        # drivers before ~510 do not know the compute_cap field and refuse the whole query: ask without it and
        # take the compute capability from the GPU table by name
        older = run(OLD_SMI_QUERY)
        if not older.ok:
            return None
        split = (r.split(",", 1) for r in older.stdout.splitlines() if r.strip())
        out = Result(ok=True, stdout="\n".join(f"{s[0]}, ,{s[1] if len(s) > 1 else ''}" for s in split))
    return [r for r in out.stdout.strip().splitlines() if r.strip()]


def _memory_gb(mem_mib: str) -> float | None:
    try:
        return round(float(mem_mib) * 1048576 / 1e9, 1)
    except ValueError:
        return None


def _gpu_row(facts: Facts, i: int, row: str) -> None:
    """GPU i's facts from its nvidia-smi row (a short row is skipped)."""
    cols = [c.strip() for c in row.split(",")]
    if len(cols) < 5:
        return
    name, cc, mem_mib, bus, drv = cols[:5]
    facts[f"gpu.{i}.name"] = name
    facts[f"gpu.{i}.compute_capability"] = cc if re.match(r"^\d+\.\d+$", cc) else name_to_cc(name)
    facts[f"gpu.{i}.memory_gb"] = _memory_gb(mem_mib)
    facts[f"gpu.{i}.pci_bus_id"] = bus
    facts["driver.version"] = drv


def probe_smi(run: Runner) -> Facts | None:
    rows = _smi_rows(run)
    if rows is None:
        return None
    facts: Facts = {"gpu.source": "nvidia-smi", "gpu.count": len(rows)}
    for i, row in enumerate(rows):
        _gpu_row(facts, i, row)
    head = run(["nvidia-smi"])
    m = re.search(r"CUDA Version:\s*([\d.]+)", head.stdout) if head.ok else None
    facts["driver.cuda_version"] = m.group(1) if m else None
    return facts


def probe_topology(run: Runner, gpu_count: int) -> Facts:
    """NVLink presence from `nvidia-smi topo -m` (only asked when there are several GPUs)."""
    if gpu_count < 2:
        return {"gpu.nvlink": False if gpu_count == 1 else None}
    out = run(["nvidia-smi", "topo", "-m"])
    if not out.ok:
        return {"gpu.nvlink": None}
    return {"gpu.nvlink": bool(re.search(r"\bNV\d+\b", out.stdout))}


def driver_present() -> bool:
    """Cheap test before loading NVML: a Linux NVIDIA driver, or WSL2's GPU paravirtualization device."""
    return any(os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"))


def probe(run: Runner, use_nvml: bool = True) -> Facts:
    facts = (probe_nvml() if use_nvml and driver_present() else None) or probe_smi(run)
    if facts is None:
        return {"gpu.count": 0, "gpu.source": "none", "driver.version": None, "driver.cuda_version": None}
    count = facts.get("gpu.count")
    facts.update(probe_topology(run, count if isinstance(count, int) else 0))
    return facts
