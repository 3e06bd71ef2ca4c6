"""float8 matmuls for the blocks (`precision: fp8`), through torchao's float8 training matmul.

With `precision: fp8` the seven projections of every block (q, k, v, out; gate, up, down) multiply in float8, by
the recipe of torchao's Float8Linear: the input and the weight are scaled by their current absolute maximum (one
scale per tensor, "tensorwise dynamic"), cast to e4m3, and multiplied on the float8 tensor cores; the gradients go
through e5m2 the same way. The projections stay `olmo.nn.linear.Linear` modules that call torchao's matmul
(`Float8Recipe.matmul`) rather than being swapped for Float8Linear, for two reasons. With the bf16 copies the
optimizer keeps on one GPU (olmo/optim/mixed_precision.py), the weight casts read the bf16 copy instead of the
fp32 master and the weight gradient stays in bf16 for the optimizer: about 14 fewer bytes of memory traffic per
block parameter and step. The numbers are then exactly those of Float8Linear over bf16 weights, which is what
torchao's float8 computes under FSDP2 with bf16 parameters (OLMo-core's and torchtitan's multi-GPU runs). And the
fused q/k/v and gate/up projections (`model.fuse_projections`) multiply their concatenated weights in float8 too:
one cast of the shared input and one GEMM instead of three.

Everything else stays as in bf16 training: fp32 master weights and AdamW state, bf16 activations and residual
stream, attention in bf16, the embedding and the output head untouched (as OLMo-core's and torchtitan's float8
recipes leave them: the head's logits go straight into the softmax). The parameters are still `weight` tensors
of the same shapes, so checkpoints, `export-hf` and `init-from` work across bf16 and fp8 runs.

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
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from olmo.nn.linear import Linear

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
        import torchao.float8.float8_linear  # noqa: F401 (the training matmul; an attribute of float8 once imported)
    finally:
        for n, level in zip(names, levels, strict=True):
            logging.getLogger(n).setLevel(level)
    return float8


# what the trainer uses from torchao.float8 (dotted: a submodule's name); the doctor's torch worker checks the same
API = ("Float8LinearConfig", "float8_linear.Float8Linear", "float8_linear.matmul_with_hp_or_float8_args")


def _missing(module: object) -> list[str]:
    gone = []
    for name in API:
        obj: object | None = module
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            gone.append(name)
    return gone


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
    # the names apply_float8 and Float8Recipe call: a torchao without them would fail mid-setup with a traceback
    gone = _missing(module)
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


def convertible(module: nn.Module, fqn: str = "") -> bool:
    """A block projection whose dimensions the float8 GEMM takes (multiples of 16); the embedding and the LM head
    are never passed here."""
    return isinstance(module, Linear) and all(d % 16 == 0 for d in module.weight.shape)


@dataclass(frozen=True)
class Float8Recipe:
    """torchao's float8 training recipe (its default Float8LinearConfig: tensorwise dynamic scales, e4m3 forward,
    e5m2 gradients), the GEMM settings Float8Linear derives from it, and torchao's float8 training matmul (an
    autograd function torch.compile traces as one op), applied to any (input, weight) pair."""

    config: Any
    mm_config: Any
    function: Any

    @classmethod
    def default(cls) -> Float8Recipe:
        float8: Any = _import_float8()
        config = float8.Float8LinearConfig()
        # Float8Linear derives its per-GEMM settings from the config in its constructor: one on the meta device
        # (no memory) gives exactly the settings a swapped-in module would use
        template = float8.float8_linear.Float8Linear(16, 16, bias=False, config=config, device="meta")
        return cls(config, template.linear_mm_config, float8.float8_linear.matmul_with_hp_or_float8_args)

    def matmul(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """x @ weight.T in float8, as Float8Linear's forward: under autocast the input enters in the autocast
        dtype; the weight as given (the bf16 copy, or the fp32 master when there is none)."""
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type):
            x = x.to(torch.get_autocast_dtype(device_type))
        out: torch.Tensor = self.function.apply(x, weight.t(), self.mm_config, self.config)
        return out


def apply_float8(model: nn.Module) -> int:
    """Make every convertible projection of `model.blocks` multiply in float8; returns how many. The modules and
    parameters stay what they were (same names, same tensors), so checkpoints, `export-hf` and `init-from` work
    across bf16 and fp8 runs. Call it on the plain model, before compile wraps the blocks."""
    recipe = Float8Recipe.default()
    count = 0
    for module in model.get_submodule("blocks").modules():
        if convertible(module):
            module.float8 = recipe  # type: ignore[assignment]
            count += 1
    return count


def is_float8(model: nn.Module) -> bool:
    """Whether any module of `model` multiplies in float8 (for the run's log line)."""
    return any(getattr(m, "float8", None) is not None for m in model.modules())
