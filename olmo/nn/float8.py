"""float8 matmuls for the blocks (`precision: fp8`), through torchao's Float8Linear.

With `precision: fp8` the seven projections of every block (q, k, v, out; gate, up, down) multiply in float8:
torchao's Float8Linear scales the input and the weight by their current absolute maximum (one scale per tensor,
"tensorwise dynamic"), casts them to e4m3, and runs the GEMM on the float8 tensor cores; the gradients go through
e5m2 the same way. Everything else stays as in bf16 training: fp32 master weights and AdamW state, bf16
activations and residual stream, attention in bf16, the embedding and the output head untouched (as OLMo-core's
and torchtitan's float8 recipes leave them: the head's logits go straight into the softmax). The parameters are
still `weight` tensors of the same shapes, so checkpoints, `export-hf` and `init-from` work across bf16 and fp8
runs.

Under FSDP2 the weights are all-gathered in bf16 and cast to float8 after the gather. torchao can also gather
them in float8 (half the bytes), but then every parameter is its tensor subclass and the checkpoints pickle it:
torch.load refuses them without allow-listing a torchao class, and OLMo-core and `export-hf` could not read them
as plain tensors. (Not measured here: whether the bf16 gather is exposed at all on NVLink at 7B.)

Float8 tensor cores exist from compute capability 8.9 (Ada, Hopper, Blackwell); `problem()` says why a run
cannot use fp8 here, in one line, before anything is built. torchao is an optional dependency (the `fp8` extra).
"""

from __future__ import annotations

import logging
import os

import torch
import torch.nn as nn

MIN_CAPABILITY = (8, 9)  # also in olmo_doctor/compat/kernels.py, for `check`: the trainer does not import the doctor
INSTALL_HINT = "pip install torchao (or the olmo-doctor[fp8] extra)"


def _import_float8() -> object:
    """torchao.float8, imported quietly: torchao logs a warning for each of its optional C++ kernels that does not
    match the installed torch, and torch logs a deprecation from torchao's pytree registrations; neither matters
    to the float8 training path, which is Python over torch._scaled_mm."""
    names = ("torchao", "torch.utils._pytree")
    levels = [logging.getLogger(n).level for n in names]
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        import torchao.float8 as float8
    finally:
        for n, level in zip(names, levels, strict=True):
            logging.getLogger(n).setLevel(level)
    return float8


API = ("Float8LinearConfig", "convert_to_float8_training")


def _unfit(e: BaseException) -> str:
    # the exception's own text may be long or hold paths: its type, and a "has no" list, are enough to act on
    detail = str(e) if str(e).startswith("torchao.float8 has no ") else type(e).__name__
    return (f"precision fp8 needs torchao, which fails to import here ({detail}); reinstall it for this torch, "
            "or use precision bf16")


EMULATION = "OLMO_FP8_EMULATION"  # =1: let fp8 run on a device without float8 tensor cores (tests; slow)


def problem(device: torch.device) -> str | None:
    """Why `precision: fp8` cannot run on `device` (one line with what to do), or None when it can."""
    return software_problem() or hardware_problem(device)


def software_problem() -> str | None:
    """Why torchao's float8 training cannot be used in this environment, or None."""
    try:
        module = _import_float8()
    except ModuleNotFoundError as e:
        if e.name == "torchao":
            return f"precision fp8 needs torchao, which is not installed: {INSTALL_HINT}, or use precision bf16"
        return _unfit(e)  # torchao is there, but not its float8 module (too old) or a package it needs
    except Exception as e:  # a torchao built for another torch fails at import in many ways ("cannot import name")
        return _unfit(e)
    # the two names apply_float8 calls: a torchao too old to have them would fail mid-setup with a traceback
    gone = [n for n in API if not hasattr(module, n)]
    return _unfit(ImportError(f"torchao.float8 has no {', '.join(gone)}")) if gone else None


def hardware_problem(device: torch.device) -> str | None:
    """Why `device` cannot run fp8: only a GPU with float8 tensor cores can (compute capability 8.9 or newer).
    torch also runs float8 matmuls on a CPU, far slower than fp32 there: refused like any device without the
    tensor cores, unless OLMO_FP8_EMULATION=1 asks for it (how the float8 path is tested without a GPU)."""
    if device.type == "cuda":
        cap = torch.cuda.get_device_capability(device)
        if cap < MIN_CAPABILITY:
            name = torch.cuda.get_device_name(device)
            return (f"precision fp8 needs float8 tensor cores (compute capability 8.9 or newer: Ada, Hopper, "
                    f"Blackwell); {name} is {cap[0]}.{cap[1]}; use precision bf16")
        return None
    if os.environ.get(EMULATION) != "1":
        return (f"precision fp8 needs float8 tensor cores (an NVIDIA GPU of compute capability 8.9 or newer: Ada, "
                f"Hopper, Blackwell), and this run is on {device.type}; use precision bf16 or fp32")
    try:  # emulation asked for: torch may or may not implement float8 matmuls here, so try one
        a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
        one = torch.ones((), device=device)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
    except (RuntimeError, NotImplementedError, AttributeError, TypeError):
        return (f"precision fp8 needs float8 matmuls, which this torch ({torch.__version__}) does not have on "
                f"{device.type}; use a GPU with compute capability 8.9 or newer, or precision bf16")
    return None


def convertible(module: nn.Module, fqn: str) -> bool:
    """A block projection whose dimensions the float8 GEMM takes (multiples of 16); the embedding and the LM head
    are never passed here."""
    return isinstance(module, nn.Linear) and all(d % 16 == 0 for d in module.weight.shape)


def apply_float8(model: nn.Module) -> int:
    """Swap every convertible projection of `model.blocks` for a Float8Linear sharing its weight; returns how many.

    Call it on the plain model, before activation checkpointing, compile and FSDP2 wrap the blocks. The fused
    q/k/v and gate/up paths are turned off: they multiply by a concatenation of the weights, which would bypass
    the float8 modules."""
    float8 = _import_float8()
    blocks = model.get_submodule("blocks")
    before = sum(convertible(m, "") for m in blocks.modules())
    config = float8.Float8LinearConfig()  # type: ignore[attr-defined]
    float8.convert_to_float8_training(blocks, config=config, module_filter_fn=convertible)  # type: ignore[attr-defined]
    for block in blocks.children():
        setattr(block.get_submodule("attention"), "fused_qkv", False)  # noqa: B010 (plain attributes of nn.Modules)
        setattr(block.get_submodule("feed_forward"), "fused", False)  # noqa: B010
    return before


def is_float8(model: nn.Module) -> bool:
    """Whether any module of `model` multiplies in float8 (for the run's log line)."""
    return any(type(m).__name__ == "Float8Linear" for m in model.modules())
