"""Machine facts: memory and CPUs (cgroup-aware), resource limits, /dev/shm, free disk, OS, WSL, containers, conda."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import sys
import tempfile
from pathlib import Path

from olmo_common.bounded.files import read_text
from olmo_doctor.facts import Facts
from olmo_doctor.probes import cgroup

GB = 1e9


def _limit(value: int) -> int:
    return -1 if value == resource.RLIM_INFINITY else int(value)


def _meminfo() -> tuple[int, int] | None:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo: exactly what psutil.virtual_memory() reads on
    Linux, without psutil's ~25 ms import on a command that must answer in a fraction of a second."""
    try:
        lines = read_text("/proc/meminfo", "system file", errors="replace").splitlines()
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        return int(fields["MemTotal"].split()[0]) * 1024, int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def memory() -> Facts:
    info = _meminfo()
    if info is None:
        import psutil

        vm = psutil.virtual_memory()
        info = (vm.total, vm.available)
    total, available = info
    limit = cgroup.memory_limit_bytes()
    if limit is not None and limit < total:
        used = cgroup.memory_used_bytes() or 0
        total, available = limit, max(0, min(available, limit - used))
    return {
        "mem.total_gb": round(total / GB, 1),
        "mem.available_gb": round(available / GB, 1),
        "mem.cgroup_limit_gb": round(limit / GB, 1) if limit is not None else None,
    }


# ulimit.<name>.soft/hard facts: the limits a training run or a kernel build can hit (ulimit -n, -l, -v, -d, -f,
# -t, -u, -s); -1 is unlimited
LIMITS = {"nofile": "RLIMIT_NOFILE", "memlock": "RLIMIT_MEMLOCK", "as": "RLIMIT_AS", "data": "RLIMIT_DATA",
          "fsize": "RLIMIT_FSIZE", "cpu": "RLIMIT_CPU", "nproc": "RLIMIT_NPROC", "stack": "RLIMIT_STACK"}


def limits() -> Facts:
    facts: Facts = {}
    for name, constant in LIMITS.items():
        try:
            soft, hard = resource.getrlimit(getattr(resource, constant))
        except (AttributeError, ValueError, OSError):  # a limit this platform does not have
            continue
        facts[f"ulimit.{name}.soft"], facts[f"ulimit.{name}.hard"] = _limit(soft), _limit(hard)
    facts["user.is_root"] = os.geteuid() == 0  # root is exempt from the process limit (ulimit -u)
    return facts


def _free_gb(path: str) -> float | None:
    p = Path(path)
    while not p.exists() and p != p.parent:  # the pip cache may not exist yet: measure where it would be
        p = p.parent
    try:
        return round(shutil.disk_usage(p).free / GB, 1)
    except OSError:
        return None


def disks() -> Facts:
    pip_cache = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    free = {
        "disk.free_gb.venv": _free_gb(sys.prefix),
        "disk.free_gb.pip_cache": _free_gb(pip_cache),
        "disk.free_gb.tmp": _free_gb(tempfile.gettempdir()),
    }
    known = [v for v in free.values() if v is not None]
    shm = None
    try:
        st = os.statvfs("/dev/shm")
        shm = round(st.f_blocks * st.f_frsize / GB, 2)
    except OSError:
        pass
    return {"disk.free_gb": min(known) if known else None, **free, "shm.size_gb": shm}


def _os_name() -> str | None:
    try:
        for line in read_text("/etc/os-release", "system file", errors="replace").splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system() or None


def container() -> str | bool:
    marked = next((name for path, name in _MARKER_FILES if os.path.exists(path)), None)
    if marked:
        return marked
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    text = _pid1_cgroup()
    in_cgroup = next((name for needle, name in _CGROUP_RUNTIMES if needle in text), None)
    return in_cgroup or os.environ.get("container") or False  # noqa: SIM112 - systemd-nspawn and lxc set `container`


# files a container runtime leaves at the root, and what PID 1's cgroup path names
_MARKER_FILES = (("/.dockerenv", "docker"), ("/run/.containerenv", "podman"))
_CGROUP_RUNTIMES = (("kubepods", "kubernetes"), ("docker", "docker"), ("lxc", "lxc"), ("containerd", "containerd"))


def _pid1_cgroup() -> str:
    try:
        return read_text("/proc/1/cgroup", "system file", errors="replace")
    except OSError:
        return ""


def os_facts() -> Facts:
    release = platform.release()
    try:
        wsl = "microsoft" in read_text("/proc/sys/kernel/osrelease", "system file", errors="replace").lower()
    except OSError:
        wsl = "microsoft" in release.lower()
    return {
        "os.name": _os_name(),
        "os.kernel": release,
        "os.arch": platform.machine(),
        "os.wsl": wsl,
        "os.container": container(),
        "os.conda_env": os.environ.get("CONDA_PREFIX"),
        "infiniband.present": bool(os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband")),
    }


def probe() -> Facts:
    cpus = cgroup.usable_cpus()
    return {
        **memory(),
        "cpu.count": cpus,
        "cpu.physical_count": os.cpu_count(),
        **limits(),
        **disks(),
        **os_facts(),
    }
