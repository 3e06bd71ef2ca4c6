"""Facts: the flat, dotted-key vocabulary every part of olmo-doctor speaks.

A fact key names one thing about a machine (`nvcc.version`, `gpu.0.compute_capability`); its value is a JSON
scalar, a list of strings, or None when unknown. Probes produce facts, reports and fixtures replay them, rules
read them. `FACT_KEYS` documents every key a probe may emit; `docs` (olmo-doctor facts --keys) prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from olmo_doctor.shell import has_control

FactValue = str | int | float | bool | list[str] | None
Facts = dict[str, FactValue]

# key -> one-line meaning. `gpu.N.*` keys exist for N in range(gpu.count); they are documented as gpu.N.
FACT_KEYS: dict[str, str] = {
    # GPUs and driver
    "gpu.count": "number of visible NVIDIA GPUs (0 when none; null when unknown)",
    "gpu.source": "where the GPU facts came from: pynvml, nvidia-smi, report, or none",
    "gpu.N.name": "marketing name, e.g. 'NVIDIA H200'",
    "gpu.N.compute_capability": "compute capability 'major.minor', e.g. '9.0'",
    "gpu.N.memory_gb": "total device memory in GB (1e9 bytes)",
    "gpu.N.pci_bus_id": "PCI bus id",
    # GPU health (NVML, nvidia-smi fallback); absent on machines without an NVIDIA driver
    "gpu.health_source": "where the GPU health facts came from: pynvml or nvidia-smi",
    "gpu.N.ecc.volatile_uncorrected": "uncorrected ECC errors since the last driver load or GPU reset",
    "gpu.N.ecc.aggregate_uncorrected": "uncorrected ECC errors over the GPU's lifetime",
    "gpu.N.retired_pages.double_bit": "pages retired for double-bit ECC errors (pre-Ampere page retirement)",
    "gpu.N.retired_pages.pending": "a page retirement waits for the next GPU reset or reboot",
    "gpu.N.remapped_rows.uncorrectable": "memory rows remapped after uncorrectable errors (Ampere and newer)",
    "gpu.N.remapped_rows.pending": "a row remapping waits for the next GPU reset",
    "gpu.N.remapped_rows.failed": "a row remapping failed: no spare rows left in a bank",
    "gpu.N.throttle_reasons": "active clock event (throttle) reasons, e.g. ['hw_thermal_slowdown']",
    "gpu.N.temperature_c": "GPU temperature now, degrees C",
    "gpu.N.temperature_slowdown_c": "temperature at which the GPU slows its clocks, degrees C",
    "gpu.N.power_w": "power draw now, W",
    "gpu.N.power_limit_w": "enforced power limit, W",
    "gpu.N.power_default_limit_w": "the board's default power limit, W",
    "gpu.N.pcie.gen": "current PCIe link generation (drops at idle to save power)",
    "gpu.N.pcie.gen_max": "highest PCIe generation this GPU and its slot can train at",
    "gpu.N.pcie.gen_gpu_max": "highest PCIe generation the GPU itself supports",
    "gpu.N.pcie.width": "current PCIe link width (lanes)",
    "gpu.N.pcie.width_max": "widest PCIe link this GPU and its slot support",
    "gpu.N.nvlink.L.state": "state of NVLink link L: up or down",
    "gpu.N.nvlink.up": "NVLink links up",
    "gpu.N.nvlink.down": "NVLink links present but down",
    "xid.readable": "whether the kernel log (/dev/kmsg) could be read for Xid events",
    "xid.codes": "distinct NVIDIA Xid codes logged since boot, e.g. ['79']",
    "xid.events": "the last Xid lines logged since boot",
    # InfiniBand / RoCE (/sys/class/infiniband)
    "ib.DEV.PORT.state": "port state: ACTIVE, INIT, ARMED, DOWN",
    "ib.DEV.PORT.phys_state": "physical state: LinkUp, Polling, Disabled, ...",
    "ib.DEV.PORT.rate_gbps": "port rate in Gb/s (200 for 4X HDR)",
    "ib.DEV.PORT.link_layer": "InfiniBand or Ethernet (RoCE)",
    "ib.ports": "RDMA ports as 'device:port'",
    "ib.ports_down": "RDMA ports not active (administratively disabled ones excepted)",
    "ib.active_ports": "number of active RDMA ports",
    "ib.active_rate_gbps": "summed rate of the active RDMA ports, Gb/s",
    "gpu.nvlink": "true when any GPU pair is connected by NVLink (from nvidia-smi topo), else false",
    "driver.version": "NVIDIA kernel driver version, e.g. '580.159.04'",
    "driver.cuda_version": "highest CUDA version the driver supports, e.g. '13.0'",
    # CUDA toolkit
    "nvcc.path": "absolute path of the nvcc that builds extensions (CUDA_HOME/bin/nvcc, else PATH)",
    "nvcc.version": "nvcc release 'major.minor', e.g. '13.0'",
    "nvcc.full_version": "nvcc full version, e.g. '13.0.88'",
    "nvcc.max_gcc": "highest GCC major nvcc's crt/host_config.h accepts",
    "nvcc.on_path": "path of the nvcc found on PATH (may differ from nvcc.path)",
    "cuda.home": "CUDA_HOME (or CUDA_PATH) as torch.utils.cpp_extension would resolve it",
    "cuda.home_env": "the CUDA_HOME environment variable as set, or null",
    "cuda.home_nvcc_version": "release of the nvcc inside cuda.home, when it exists",
    "cuda.home_has_headers": "whether cuda.home/include/cuda_runtime.h exists (torch compiles against it)",
    "cuda.toolkit_root": "the real toolkit directory (with include/cuda_runtime.h) that nvcc belongs to",
    "nvcc.on_path_version": "release of the nvcc on PATH when it is another binary than nvcc.path",
    "cudnn.version": "system cuDNN version found by the loader cache, if any",
    # Host toolchain and C libraries
    "gcc.version": "version of the host C++ compiler nvcc will use (CXX, else g++), e.g. '13.3.0'",
    "gcc.path": "path of that compiler",
    "gcc.cc_env": "the CC environment variable, or null",
    "gcc.cxx_env": "the CXX environment variable, or null",
    "gcc.is_clang": "true when the host compiler is clang",
    "gcc.env_missing": "CC / CXX / CUDAHOSTCXX values naming a compiler that does not exist or is not executable",
    "gcc.alternatives": "other g++-N compilers on PATH, as 'major:path' strings",
    "glibc.version": "glibc version, e.g. '2.39'",
    "libstdcxx.path": "the libstdc++.so.6 this Python process loads",
    "libstdcxx.glibcxx_max": "highest GLIBCXX_ symbol version it provides, e.g. '3.4.33'",
    # Machine
    "mem.total_gb": "RAM usable by this process in GB (cgroup limit when lower than physical)",
    "mem.available_gb": "RAM available now in GB (cgroup-aware)",
    "mem.cgroup_limit_gb": "cgroup memory limit in GB, or null when unlimited",
    "cpu.count": "CPUs usable by this process (affinity and cgroup quota honoured)",
    "cpu.physical_count": "CPUs the machine reports (os.cpu_count)",
    "ulimit.nofile.soft": "soft open-files limit (-1 = unlimited)",
    "ulimit.nofile.hard": "hard open-files limit (-1 = unlimited)",
    "ulimit.memlock.soft": "soft locked-memory limit in bytes (-1 = unlimited)",
    "ulimit.memlock.hard": "hard locked-memory limit in bytes (-1 = unlimited)",
    "ulimit.as.soft": "soft address-space limit in bytes (ulimit -v; -1 = unlimited)",
    "ulimit.as.hard": "hard address-space limit in bytes (-1 = unlimited)",
    "ulimit.data.soft": "soft data-segment limit in bytes (ulimit -d; counts private memory maps; -1 = unlimited)",
    "ulimit.data.hard": "hard data-segment limit in bytes (-1 = unlimited)",
    "ulimit.fsize.soft": "soft file-size limit in bytes (ulimit -f; -1 = unlimited)",
    "ulimit.fsize.hard": "hard file-size limit in bytes (-1 = unlimited)",
    "ulimit.cpu.soft": "soft CPU-time limit in seconds (ulimit -t; -1 = unlimited)",
    "ulimit.cpu.hard": "hard CPU-time limit in seconds (-1 = unlimited)",
    "ulimit.nproc.soft": "soft limit on the user's processes and threads (ulimit -u; -1 = unlimited)",
    "ulimit.nproc.hard": "hard limit on the user's processes and threads (-1 = unlimited)",
    "ulimit.stack.soft": "soft stack-size limit in bytes (ulimit -s; -1 = unlimited)",
    "ulimit.stack.hard": "hard stack-size limit in bytes (-1 = unlimited)",
    "user.is_root": "whether the checking process runs as root (exempt from the process limit)",
    "shm.size_gb": "size of /dev/shm in GB",
    "disk.free_gb": "lowest free space in GB among the venv, pip cache and TMPDIR",
    "disk.free_gb.venv": "free space where the Python environment lives",
    "disk.free_gb.pip_cache": "free space of the pip cache",
    "disk.free_gb.tmp": "free space of TMPDIR",
    "infiniband.present": "true when /sys/class/infiniband has devices",
    "net.interfaces": "network interfaces with an IPv4 or IPv6 address (probed when NCCL_SOCKET_IFNAME or "
                      "GLOO_SOCKET_IFNAME is set)",
    # folders training and builds write into (probed by writing a file there and removing it)
    "paths.inductor_cache": "the folder torch.compile (inductor) caches compiled code in (TORCHINDUCTOR_CACHE_DIR)",
    "paths.inductor_cache_error": "why that folder cannot be used (not a folder, not writable, mounted noexec)",
    "paths.triton_cache": "the folder Triton caches compiled kernels in (TRITON_CACHE_DIR, else ~/.triton/cache)",
    "paths.triton_cache_error": "why that folder cannot be used",
    "paths.tmpdir_error": "why the folder TMPDIR names cannot hold temporary files (nvcc and ninja write there)",
    # OS
    "os.name": "pretty OS name, e.g. 'Ubuntu 24.04.3 LTS'",
    "os.kernel": "kernel release",
    "os.arch": "machine architecture, e.g. 'x86_64'",
    "os.wsl": "true inside WSL2",
    "os.container": "container runtime detected (docker, podman, kubernetes, lxc, ...), or false",
    "os.conda_env": "active conda environment prefix, or null",
    # Python environment
    "python.version": "Python version, e.g. '3.12.3'",
    "python.executable": "the Python interpreter probed",
    "python.venv": "true when running inside a virtual environment",
    "pip.version": "installed pip version",
    "setuptools.version": "installed setuptools version",
    "wheel.version": "installed wheel version",
    "packaging.version": "installed packaging version",
    "ninja.version": "version of the ninja binary that builds will use",
    "ninja.path": "path of that ninja binary",
    "ccache.path": "path of ccache when installed (build-kernels routes nvcc through it via PYTORCH_NVCC)",
    "python.unmet_requirements": "requirements of installed distributions that are missing or at an excluded version, "
    "one '<dist> <version> requires <requirement>; has <version>|missing' line each (what pip check reports)",
    "python.pythonpath": "the absolute PYTHONPATH entries the probes' Python subprocesses import with",
    "python.pythonpath_ignored": "PYTHONPATH entries naming the working folder (empty, '.', relative), dropped",
    "path.ignored_entries": "PATH entries naming the working folder (empty, '.', relative): ignored for tools",
    "python.invalid_versions": "installed distributions whose versions are not PEP 440 (pip >= 24.1 rejects them)",
    "python.packages": "other Python packages a report states, as 'name==version' (transformers, deepspeed, vllm, "
    "triton, numpy, tokenizers, ...); a probe reads installed distributions itself",
    "olmo.module_origin": "which distribution provides the importable `olmo` module",
    # torch
    "torch.version": "installed torch version, e.g. '2.11.0+cu130'",
    "torch.path": "torch package directory",
    "torch.cuda": "CUDA version torch was built with, e.g. '13.0' (null for CPU builds)",
    "torch.cudnn": "cuDNN version torch uses, e.g. '9.19.0'",
    "torch.nccl": "NCCL version torch uses, e.g. '2.28.9'",
    "torch.cxx11abi": "whether torch was built with the C++11 ABI",
    "torch.arch_list": "architectures in torch's binary, e.g. ['sm_80', 'sm_90']",
    "torch.cuda_available": "torch.cuda.is_available()",
    "torch.import_error": "the error torch raised on import, if it failed",
    "torch.cuda_init_error": "why CUDA did not start in torch (its warning or error, first line), if it did not",
    "torch.cuda_device_count": "GPUs torch sees (torch.cuda.device_count())",
    "torch.cuda_exercised": "GPUs on which an allocation and a small matmul succeeded",
    "torch.cuda_exercise_error": "the first error of that allocation or matmul, prefixed with the device",
    "torch.alloc_conf_error": "torch's error parsing PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF, if any",
    # kernels
    "flash_attn.version": "installed flash-attn version",
    "flash_attn.import_ok": "whether flash_attn's CUDA extension imports against this torch",
    "flash_attn.import_error": "the import error, if any (first line)",
    "flash_attn_3.version": "installed FlashAttention-3 (flash_attn_3) version",
    "flash_attn_3.import_ok": "whether FlashAttention-3 (flash_attn_interface) imports against this torch",
    "flash_attn_3.import_error": "the import error, if any (first line)",
    "attention.auto_pick": "the kernel package `attn_backend: auto` takes without timing on this GPU and torch: the "
                           "one build-kernels' GPU check found faster than SDPA (sdpa when none did; timed when "
                           "build-kernels recorded nothing here: auto then times the installed backends, flex "
                           "included, at the first train)",
    "xformers.version": "installed xformers version",
    "xformers.import_ok": "whether xformers' C++/CUDA ops load against this torch",
    "xformers.import_error": "the import error, if any (first line)",
    "xformers.built_for_torch": "torch version xformers was built for (its build metadata)",
    "xformers.torch_seen": "the torch xformers found when it failed to load (its warning's \"you have X\"): what is "
                           "installed, as xformers saw it, even where a report states torch otherwise",
    "xformers.has_cpp_library": "whether xformers reports its compiled C++/CUDA library as loaded",
    # float8 training (`precision: fp8`, olmo/nn/float8.py): torchao's Float8Linear
    "torchao.version": "installed torchao version",
    "torchao.import_ok": "whether torchao.float8 (the Float8Linear conversion) imports against this torch",
    "torchao.import_error": "the import error, if any (first line)",
    # environment variables that matter
    "env.TORCH_CUDA_ARCH_LIST": "as set in the environment",
    "env.FLASH_ATTN_CUDA_ARCHS": "as set in the environment",
    "env.MAX_JOBS": "as set in the environment",
    "env.NCCL_P2P_DISABLE": "as set in the environment",
    "env.NCCL_SHM_DISABLE": "as set in the environment",
    "env.NCCL_SOCKET_NTHREADS": "as set in the environment",
    "env.NCCL_NSOCKS_PERTHREAD": "as set in the environment",
    "env.NCCL_IB_DISABLE": "as set in the environment",
    "env.NCCL_SOCKET_IFNAME": "as set in the environment (the interfaces NCCL may use)",
    "env.LD_LIBRARY_PATH": "as set in the environment",
    "env.CUDA_VISIBLE_DEVICES": "as set in the environment ('' hides every GPU from CUDA)",
    "env.NCCL_IB_HCA": "as set in the environment (the RDMA devices and ports NCCL may use)",
    "env.NCCL_NET": "as set in the environment (the network transport NCCL must use: IB, Socket or a plugin)",
    "env.NCCL_SOCKET_FAMILY": "as set in the environment (AF_INET or AF_INET6)",
    "env.NCCL_P2P_LEVEL": "as set in the environment",
    "env.NCCL_IB_GID_INDEX": "as set in the environment",
    "env.NCCL_DEBUG": "as set in the environment",
    "env.GLOO_SOCKET_IFNAME": "as set in the environment (the interfaces gloo may use: exact names)",
    "env.PYTORCH_CUDA_ALLOC_CONF": "as set in the environment (the CUDA caching allocator's options)",
    "env.PYTORCH_ALLOC_CONF": "as set in the environment (the allocator options, torch >= 2.9)",
    "env.TORCHINDUCTOR_CACHE_DIR": "as set in the environment",
    "env.TRITON_CACHE_DIR": "as set in the environment",
    "env.TMPDIR": "as set in the environment",
    "env.CUDA_LAUNCH_BLOCKING": "as set in the environment (1 makes every CUDA launch synchronous)",
    "env.PYTORCH_NO_CUDA_MEMORY_CACHING": "as set in the environment (any value turns torch's caching allocator off)",
    "env.TORCH_DISTRIBUTED_DEBUG": "as set in the environment (OFF, INFO or DETAIL)",
    "env.TORCH_CUDA_SANITIZER": "as set in the environment (any value turns CUDA Sanitizer on)",
    "env.OMP_NUM_THREADS": "as set in the environment (OpenMP threads per process; torchrun keeps a value set)",
    "env.LD_PRELOAD": "as set in the environment (libraries the dynamic loader loads into every process first)",
    "loader.preload_error": "what the dynamic loader said about LD_PRELOAD in a Python process started here (the "
                            "torch worker), first line",
    "paths.shm": "the shared-memory folder (/dev/shm) multiprocessing and NCCL create their segments in",
    "paths.shm_error": "why a file cannot be created there, if it cannot",
    # what the user plans to do (set by options, not probed)
    "plan.device": "device the planned training run uses: 'cuda', 'cpu', or null when unknown",
    "plan.data_workers": "DataLoader workers the planned run uses",
    "plan.fleet": "true when the facts are one node of a job of several (check --fleet, compare)",
    "probe.error": "a probe that failed unexpectedly (a bug report is welcome)",
    "process.error": "the error a run stopped with, when `olmo`'s error path asks the doctor about it (not probed)",
    "facts.refused": "fact keys dropped (made unknown) because their values held control characters",
    "facts.partial": "true when the facts were read from a report: a key it did not state is unknown, not absent",
    # check --nccl: a real all-reduce over the visible GPUs
    "nccl.ran": "whether the all-reduce probe ran (it needs 2+ GPUs)",
    "nccl.skipped": "why it did not run",
    "nccl.world": "number of GPUs (ranks) in the all-reduce",
    "nccl.version": "NCCL version the ranks used",
    "nccl.hang": "true when the all-reduce did not finish before the timeout",
    "nccl.error": "the last error line of a failed run",
    "nccl.busbw_gbps": "bus bandwidth of the largest all-reduce, GB/s (nccl-tests definition)",
    "nccl.size_mb": "size of that all-reduce in MiB",
    "nccl.correct": "whether every all-reduce returned the right sums",
    "nccl.results": "per-size measurements as JSON strings",
    "nccl.link": "link between GPU0 and GPU1 in nvidia-smi topo -m (NV18, PIX, SYS, ...)",
    "nccl.link_peak_gbps": "that link's peak bandwidth per direction, GB/s",
    "nccl.efficiency": "busbw / link peak",
    # check --fleet and compare: the verdict over the nodes of one job (olmo_doctor/fleet/)
    "fleet.nodes": "number of nodes compared",
    "fleet.odd": "facts that must agree across nodes and do not, one line each naming the odd nodes",
    "fleet.odd_minor": "advisory facts that differ across nodes (kernel, RDMA ports, NCCL_* variables, ...)",
    "fleet.slow": "slow nodes or links found by the timed all-reduces, one line each",
    "fleet.hang": "all-reduce tests that did not finish before the timeout",
    "fleet.error": "all-reduce tests that failed, with their error",
    # deep probes (check --deep)
    "deep.nvcc_compile_ok": "a one-line .cu compiled with the chosen host compiler",
    "deep.nvcc_compile_error": "the compiler's first error line when that failed",
}


def _documented_gpu_key(parts: list[str]) -> str:
    """gpu.3.name -> gpu.N.name; gpu.0.nvlink.7.state -> gpu.N.nvlink.L.state."""
    parts[1] = "N"
    if len(parts) == 5 and parts[2] == "nvlink" and parts[3].isdigit():
        parts[3] = "L"
    return ".".join(parts)


def documented_key(key: str) -> str:
    """Map a concrete key to its documented form: gpu.3.name -> gpu.N.name."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "gpu" and parts[1].isdigit():
        return _documented_gpu_key(parts)
    if len(parts) == 4 and parts[0] == "ib":
        return ".".join(["ib", "DEV", "PORT", parts[3]])
    return key


def gpu_indices(facts: Mapping[str, FactValue]) -> range:
    """Indices of the GPUs present in `facts` (empty when gpu.count is 0 or unknown)."""
    count = facts.get("gpu.count")
    return range(count) if isinstance(count, int) and count > 0 else range(0)


def is_unknown(facts: Mapping[str, FactValue], key: str) -> bool:
    """Not known, as opposed to known to be absent (None). Probes state every key they look at, so only facts
    read from a report (`facts.partial`) can leave a key unknown: the report simply did not say. A value refused
    as unfit (`facts.refused`: a control character, an absurd length) is unknown too: something was there, so
    "not installed" would be a wrong claim."""
    refused = facts.get("facts.refused")
    if isinstance(refused, list) and key in refused:
        return True
    return facts.get("facts.partial") is True and key not in facts


def merge(*parts: Mapping[str, FactValue]) -> Facts:
    """Merge probe outputs left to right; a later known value wins over an earlier one, never a None."""
    out: Facts = {}
    for part in parts:
        for key, value in part.items():
            if value is not None or key not in out:
                out[key] = value
    return out


def with_defaults(facts: Mapping[str, FactValue], keys: Iterable[str] = FACT_KEYS) -> Facts:
    """Return facts with every documented non-GPU key present (None when probed and absent), for stable JSON.
    Facts read from a report keep only what it stated: a null there would claim an absence nobody saw."""
    if facts.get("facts.partial") is True:
        return dict(sorted(facts.items()))
    out: Facts = {k: None for k in keys if ".N." not in k and not k.startswith("ib.DEV.")}
    out.update(facts)
    return dict(sorted(out.items()))


# The longest string a fact may hold. A GPU name, a version or a path is far shorter, and even a long PATH stays
# under it; a multi-megabyte value from a hostile report would only make every printer and rule slow.
MAX_VALUE = 16384
# A version is a short token (PEP 440 names no limit, but real ones stay under 64 characters); a longer one is a
# hostile dist-info name or a mangled report and would fill the screen wherever it is named.
MAX_VERSION = 128


def _tainted(value: object) -> bool:
    if isinstance(value, str):
        return len(value) > MAX_VALUE or has_control(value)
    if isinstance(value, (list, tuple)):
        return any(_tainted(v) for v in value)
    if isinstance(value, dict):
        return any(_tainted(k) or _tainted(v) for k, v in value.items())
    return False


def clean(facts: Mapping[str, FactValue]) -> Facts:
    """Facts fit to judge and print: a value (or key) holding a control character, or too long to be a real
    value (over MAX_VALUE characters), becomes unknown.

    A newline, CR, ESC, NUL or Unicode line separator has no business in a version, a path or a GPU name, and one
    would end a `# reason` comment or a printed command line. Wherever the value came from (a probe, the
    environment, a replayed report), it is refused here, once, and its key listed under `facts.refused`."""
    out: Facts = {}
    previous = facts.get("facts.refused")
    refused = [k for k in previous if not has_control(k)] if isinstance(previous, list) else []
    for key, value in facts.items():
        if key == "facts.refused":
            continue
        if _bad_key(key):
            refused.append(repr(key[:80])[1:-1] if isinstance(key, str) else repr(key)[:80])
        elif _bad_value(key, value):
            out[key] = None
            refused.append(key)
        else:
            out[key] = value
    out["facts.refused"] = sorted(set(refused)) or None
    return out


def _bad_key(key: object) -> bool:
    return not isinstance(key, str) or has_control(key) or len(key) > MAX_VALUE


def _bad_value(key: str, value: FactValue) -> bool:
    """A value holding a control character, too long to be real, or a version longer than any real one."""
    return _tainted(value) or (key.endswith(".version") and isinstance(value, str) and len(value) > MAX_VERSION)
