"""Conditions on what torch's worker saw when it did what training does first: start CUDA, allocate under the
allocator config, multiply on every GPU (probes/torch_worker.py). Their findings quote torch's own words."""

from __future__ import annotations

import re
from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue

# What cudaGetDeviceCount()'s error means, most specific first (the CUDA runtime's error numbers and texts;
# cuda-runtime-api "Data types used by CUDA Runtime", cudaError). Several have a rule of their own, which shows
# this generic finding nested beneath it.
INIT_CAUSES: tuple[tuple[str, str], ...] = (
    (r"Error 2\b|out of memory",
     "CUDA could not reserve host memory as it started: an address-space limit (ulimit -v), a cgroup memory "
     "limit, or a host out of memory"),
    (r"Error 34\b|stub library", "a stub libcuda.so (the toolkit's lib64/stubs) is loaded instead of the driver's"),
    (r"Error 35\b|driver version is insufficient", "the NVIDIA driver is older than torch's CUDA runtime"),
    (r"Error 46\b|busy or unavailable", "the GPUs are in exclusive-process mode and another process holds them"),
    (r"Error 100\b|no CUDA-capable device",
     "the driver shows this process no GPU: a container started without the GPUs, or no access to /dev/nvidia*"),
    (r"Error 101\b|invalid device ordinal", "CUDA_VISIBLE_DEVICES names a GPU that does not exist"),
    (r"Error 802\b|system not yet initialized",
     "an NVSwitch system whose fabric manager (nvidia-fabricmanager) is not running"),
    (r"Error 803\b|unsupported display driver",
     "the driver's kernel module and its user-space libraries are different versions (a driver upgrade without "
     "a reboot, or another libcuda first on LD_LIBRARY_PATH)"),
    (r"Error 804\b|forward compatibility", "CUDA forward-compatibility libraries on a GPU that does not support them"),
    (r"Error 805\b|MPS", "the MPS control daemon cannot be reached"),
    (r"Error 999\b|unknown error", "the driver is in a bad state (nvidia_uvm not loaded, or after a suspend)"),
    (r"Error 3\b|initialization error", "the driver failed to initialise"),
)
# allocator-config errors, as torch words them at the first allocation (older CUDACachingAllocator parser,
# and the device-generic parser of torch >= 2.9)
ALLOC_CONF_ERROR = re.compile(r"CachingAllocator option|allocator config|ConfigTokenizer|max_split_size_mb|"
                              r"garbage_collect\w*_threshold|roundup_power2_divisions|expandable_segments|"
                              r"pinned_\w+|release_lock_on_cudamalloc|Expected a single True/False|"
                              r"\bbackend\b.*(?:native|cudaMallocAsync)|per_process_memory_fraction", re.I)


def init_cause(error: str) -> str:
    for pattern, cause in INIT_CAUSES:
        if re.search(pattern, error, re.I):
            return cause
    return "see the error; `nvidia-smi` and `ls -l /dev/nvidia*` show whether the driver and devices are usable"


@fact_check
def cuda_init_failed(facts: Mapping[str, FactValue]) -> Context:
    """torch is a CUDA build, the plan needs a GPU, and CUDA did not start (torch's own reason is known)."""
    error = facts.get("torch.cuda_init_error")
    if not isinstance(error, str) or not error or facts.get("plan.device") == "cpu":
        return None
    return {"cuda_error": error, "likely_cause": init_cause(error)}


@fact_check
def cuda_exercise_failed(facts: Mapping[str, FactValue]) -> Context:
    """CUDA started, but an allocation or a small matmul on a visible GPU failed (not the allocator config)."""
    error = facts.get("torch.cuda_exercise_error")
    if not isinstance(error, str) or not error or facts.get("plan.device") == "cpu" or ALLOC_CONF_ERROR.search(error):
        return None
    done, count = facts.get("torch.cuda_exercised"), facts.get("torch.cuda_device_count")
    return {"cuda_error": error, "gpus_ok": done if isinstance(done, int) else 0,
            "gpus_seen": count if isinstance(count, int) else "unknown"}


# The options torch's CUDA caching allocator reads (c10/cuda/CUDAAllocatorConfig and the device-generic
# AcceleratorAllocatorConfig of torch >= 2.9) and what each accepts: a value check for each.
_BOOL = ("True", "False")
_INT = re.compile(r"^\d+$")
OPTIONS = {
    "backend": lambda v: v in ("native", "cudaMallocAsync"),
    "expandable_segments": lambda v: v in _BOOL,
    "release_lock_on_cudamalloc": lambda v: v in _BOOL,
    "pinned_use_cuda_host_register": lambda v: v in _BOOL,
    "pinned_use_background_threads": lambda v: v in _BOOL,
    "graph_capture_record_stream_reuse": lambda v: v in _BOOL,
    "max_split_size_mb": lambda v: bool(_INT.match(v)) and int(v) > 20,
    "max_non_split_rounding_mb": lambda v: bool(_INT.match(v)),
    "pinned_reserve_segment_size_mb": lambda v: bool(_INT.match(v)),
    "pinned_num_register_threads": lambda v: bool(_INT.match(v)) and 0 < int(v) <= 128 and int(v) & (int(v) - 1) == 0,
    "garbage_collection_threshold": lambda v: _fraction(v),
    "per_process_memory_fraction": lambda v: _fraction(v, closed=True),
    "roundup_power2_divisions": lambda v: _divisions(v),
}


def _fraction(value: str, closed: bool = False) -> bool:
    try:
        x = float(value)
    except ValueError:
        return False
    return 0.0 <= x <= 1.0 if closed else 0.0 < x < 1.0


def _divisions(value: str) -> bool:
    """A power of two, or a list like [256:4,512:2,>:1] of size:power-of-two pairs."""
    if not value.startswith("["):
        return _power_of_two(value)
    if not value.endswith("]"):
        return False
    pairs = [p.split(":") for p in value[1:-1].split(",") if p]
    return bool(pairs) and all(_division(p) for p in pairs)


def _power_of_two(v: str) -> bool:
    return bool(_INT.match(v)) and int(v) > 0 and int(v) & (int(v) - 1) == 0


def _division(pair: list[str]) -> bool:
    """size:power-of-two, the size a number or ">" (every larger size)."""
    return len(pair) == 2 and (pair[0] == ">" or bool(_INT.match(pair[0]))) and _power_of_two(pair[1])


def _entries(value: str) -> list[str]:
    """key:value entries, commas inside a [..] list kept."""
    out, depth, cur = [], 0, ""
    for c in value:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += c
    return [e.strip() for e in [*out, cur] if e.strip()]


def alloc_conf_problem(value: str) -> str | None:
    """What is wrong with an allocator config value, by torch's documented options, or None."""
    for entry in _entries(value):
        key, sep, val = entry.partition(":")
        key, val = key.strip(), val.strip()
        if not sep or not key or not val:
            return f"'{entry}' is not option:value"
        check = OPTIONS.get(key)
        if check is not None and not check(val):
            return f"'{val}' is not a valid value for {key}"
    return None


def _torch_refused(facts: Mapping[str, FactValue]) -> str | None:
    """torch's own refusal of the allocator config: its parse in the worker, or its first allocation's error."""
    parsed, first_use = facts.get("torch.alloc_conf_error"), facts.get("torch.cuda_exercise_error")
    if isinstance(parsed, str) and parsed:
        return parsed
    return first_use if isinstance(first_use, str) and ALLOC_CONF_ERROR.search(first_use) else None


@fact_check
def allocator_config_invalid(facts: Mapping[str, FactValue]) -> Context:
    """PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF is malformed: torch refused it in the worker, or a documented
    option has a value torch rejects (`expandable_segments:true` must be `True`)."""
    found = next(((var, value) for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
                  if isinstance(value := facts.get(f"env.{var}"), str) and value.strip()), None)
    if found is None:
        return None
    var, value = found
    torch_error = _torch_refused(facts)
    problem = torch_error or alloc_conf_problem(value)
    if problem is None:
        return None
    return {"alloc_var": var, "alloc_value": value, "alloc_error": problem,
            "who": "torch says" if torch_error else "by torch's documented options"}
