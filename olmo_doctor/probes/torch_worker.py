"""The torch-importing worker: what training will do first, done once, cheaply, in a throwaway Python process.

`torch_probe` runs this file's source with `python -c` (never imported by olmo-doctor itself). It imports torch,
initialises CUDA, allocates under the current allocator config and multiplies a small matrix on every visible GPU,
parses the allocator config the way torch will, then imports each installed kernel's extension on its own. Every
failure is recorded verbatim (its first line), so a finding can quote what torch or the loader said.

It prints its facts as one JSON line after the torch checks and again after each kernel import: an import that
kills the interpreter (a torchao built for another torch aborts it) loses only its own answer, and `torch_probe`
then tries the kernels after it in a fresh worker.

Arguments: the kernel keys to import (flash_attn, flash_attn_3, xformers, torchao); `--kernels-only` skips the
torch and CUDA checks (a second worker after a crash).
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from typing import Any

Facts = dict[str, Any]
# the module each kernel key imports: its compiled extension, or the entry point that loads it
IMPORTS = (("flash_attn", "flash_attn_2_cuda"), ("flash_attn_3", "flash_attn_interface"),
           ("xformers", "xformers.ops"), ("torchao", "torchao.float8"))
# torch appends where in its C++ sources a warning was raised; the cause is before it
_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*$")


def first_line(e: BaseException | str) -> str:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    lines = text.strip().splitlines()
    return _TRIGGERED.sub("", lines[0] if lines else text)[:400]


def emit(out: Facts) -> None:
    print(json.dumps(out), flush=True)


def torch_facts(torch: Any, out: Facts) -> None:
    """Build facts only an imported torch knows: C++ ABI, arch list, cuDNN, NCCL."""
    out["torch.cxx11abi"] = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False))
    try:
        out["torch.arch_list"] = list(torch.cuda.get_arch_list())
    except Exception:
        out["torch.arch_list"] = []
    v = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if v:
        parts = (v // 10000, v % 10000 // 100, v % 100) if v >= 90000 else (v // 1000, v % 1000 // 100, v % 100)
        out["torch.cudnn"] = "%d.%d.%d" % parts
    try:
        out["torch.nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version()) if torch.version.cuda else None
    except Exception:
        out["torch.nccl"] = None


# the warnings torch turns a failed CUDA start into
_CUDA_START_WORDS = re.compile("CUDA initialization|cudaGetDeviceCount|CUDA driver")


def cuda_init(torch: Any, out: Facts) -> int:
    """torch.cuda.is_available() and the device count, with the reason CUDA did not start: torch turns a failed
    cudaGetDeviceCount() into a UserWarning and False, so the warning is caught and kept."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            available = bool(torch.cuda.is_available())
            count = int(torch.cuda.device_count()) if available else 0
        except Exception as e:  # a broken driver can raise here too
            available, count = False, 0
            out["torch.cuda_init_error"] = first_line(e)
    out["torch.cuda_available"] = available
    out["torch.cuda_device_count"] = count
    for w in caught:
        if _CUDA_START_WORDS.search(str(w.message)):
            out.setdefault("torch.cuda_init_error", first_line(str(w.message)))
    if not available and torch.version.cuda and "torch.cuda_init_error" not in out:
        _runtime_reason(torch, out)
    return count


def _runtime_reason(torch: Any, out: Facts) -> None:
    """CUDA compiled in but no device: torch.cuda.init() raises the runtime's own reason."""
    try:
        torch.cuda.init()
    except Exception as e:
        out["torch.cuda_init_error"] = first_line(e)


def cuda_exercise(torch: Any, count: int, out: Facts) -> None:
    """What the first training step does on each visible GPU: allocate under the current allocator config
    (PYTORCH_CUDA_ALLOC_CONF is parsed at the first allocation), multiply, synchronise."""
    ok = 0
    for i in range(count):
        try:
            a = torch.ones((64, 64), device=f"cuda:{i}")
            (a @ a).sum().item()  # .item() synchronises: an asynchronous kernel fault shows here
            ok += 1
        except Exception as e:
            out.setdefault("torch.cuda_exercise_error", f"cuda:{i}: {first_line(e)}")
    out["torch.cuda_exercised"] = ok


def allocator_config(torch: Any, out: Facts) -> None:
    """The allocator config parsed as torch parses it, also without a GPU (torch >= 2.9 has a device-generic
    parser): a malformed value is named here instead of at the first allocation of a run."""
    if not (os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")):
        return
    parse = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    if parse is None:
        return
    try:
        parse()
    except Exception as e:
        out["torch.alloc_conf_error"] = first_line(e)


def _xformers_load_error() -> str | None:
    """xformers imports even when its compiled library does not load: it keeps the loader's error as the cause
    of `_cpp_library_load_exception` and only logs a warning."""
    try:
        from xformers import _cpp_lib
    except Exception:
        return None
    failure = getattr(_cpp_lib, "_cpp_library_load_exception", None)
    if failure is None or type(failure).__name__ == "xFormersWasNotBuiltException":
        return None  # loaded, or built without its library (has_cpp_library says so)
    cause = failure.__cause__ or failure
    return first_line(cause)


# what `precision: fp8` calls in torchao.float8 (olmo/nn/float8.py's API; dotted: in a submodule)
FLOAT8_API = ("Float8LinearConfig", "float8_linear.Float8Linear", "float8_linear.matmul_with_hp_or_float8_args")


def _float8_api(m: Any) -> None:
    """torchao.float8 without the training API the trainer calls is as good as not importable."""
    try:
        __import__(m.__name__ + ".float8_linear")  # as the trainer imports it
    except ModuleNotFoundError as e:
        if e.name != m.__name__ + ".float8_linear":
            raise
    gone = []
    for name in FLOAT8_API:
        obj = m
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            gone.append(name)
    if gone:
        raise ImportError("torchao.float8 has no " + ", ".join(gone))


def _xformers_library(out: Facts) -> None:
    """Whether xformers' C++ library loaded, and the reason when it did not (then xformers counts as failed)."""
    import xformers

    has = getattr(xformers, "_has_cpp_library", None)
    out["xformers.has_cpp_library"] = bool(has) if has is not None else None
    load_error = _xformers_load_error()
    if load_error:
        out["xformers.import_ok"], out["xformers.import_error"] = False, load_error


def import_kernel(key: str, module: str, out: Facts) -> None:
    try:
        m = __import__(module, fromlist=["_"])
        if key == "torchao":
            _float8_api(m)
        out[key + ".import_ok"] = True
        if key == "xformers":
            _xformers_library(out)
    except Exception as e:
        out[key + ".import_ok"] = False
        out[key + ".import_error"] = first_line(e)


def _torch_part(torch: Any, out: Facts) -> None:
    torch_facts(torch, out)
    emit(out)  # answered for torch, should starting CUDA take the process down
    count = cuda_init(torch, out)
    cuda_exercise(torch, count, out)
    allocator_config(torch, out)


def main(argv: list[str]) -> None:
    if sys.path and sys.path[0] == "":  # never import a torch/ folder from wherever `check` runs
        del sys.path[0]
    kernels_only = "--kernels-only" in argv
    wanted = [a for a in argv if not a.startswith("--")]
    out: Facts = {}
    try:
        import torch
    except Exception as e:
        emit({"torch.import_error": first_line(e)})
        return
    if not kernels_only:
        _torch_part(torch, out)
    emit(out)
    for key, module in IMPORTS:
        if key in wanted:
            import_kernel(key, module, out)
            emit(out)


if __name__ == "__main__":
    main(sys.argv[1:])
