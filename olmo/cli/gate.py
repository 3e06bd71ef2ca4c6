"""The doctor gate: `olmo train` asks `olmo-doctor check --scope train` about this machine before it trains.

This module is the one place olmo imports olmo_doctor (besides `python -m olmo`'s memory-limit guard;
tests/project/test_import_boundaries.py holds it to that), always
inside a function, so olmo runs without its doctor: the verdict before training (`doctor_gate`), the device to
judge (`plan_device`), the process's tool search path (`isolate_tool_path`), the machine's fault behind an error
(`limit_fault`, `environment_fault`) and the attention backend `olmo-doctor build-kernels` measured fastest
(`kernels_measured_backend`)."""

from __future__ import annotations

import os
from typing import Any

from olmo.cli.common import err
from olmo.errors import OlmoError
from olmo.terminal import inert

# how sure diagnose must be before an unexpected exception is called the machine's fault rather than a bug
FAULT_CONFIDENCE = 0.5


def doctor_gate(plan_device: str, skip: bool) -> None:
    """Refuse to train on a machine `olmo-doctor check --scope train` finds errors on: one line naming each root
    problem by the doctor's code, exit 2 (the environment is the input at fault). Under torchrun only the first
    process of each node checks (the machine is the same for all of them); if it refuses, torchrun stops the
    other processes."""
    if int(os.environ.get("LOCAL_RANK", 0)) != 0:
        return
    if skip:
        err.print("[bold red]WARNING: --skip-doctor: training without checking this machine. Failures from a broken "
                  "CUDA/driver/kernel stack will show up mid-run instead of here.[/]")
        return
    from olmo_doctor.api import run_check  # imported here: the doctor's probes are only needed for training
    from olmo_doctor.errors import UsageError

    fault = None
    try:
        result = run_check(scope="train", plan_device=plan_device)
    except UsageError as e:
        raise OlmoError(str(e)) from None
    except Exception as e:  # a bug in a probe is not evidence of a broken machine: say so and train
        fault = limit_fault(e)  # unless the doctor itself ran out of room under a memory limit
        if fault is None:
            err.print(f"[yellow]warning: olmo-doctor check could not run ({type(e).__name__}: {inert(str(e))}); "
                      "training without it[/]")
            return
    if fault is not None:  # raised outside the handler: the memory error is said once, not again as its context
        raise OlmoError(fault)
    if result.has_errors:
        raise OlmoError(refusal(result.findings, plan_device))


def refusal(findings: list[Any], plan_device: str) -> str:
    """The gate's one line: every root error (consequences are fixed with their root) by code and title, the
    first fix's first command, and where the full explanation is."""
    errors = [f for f in findings if f.severity == "error" and not getattr(f, "root", None)]
    named = "; ".join(f"{f.code} {f.title}" for f in errors)
    first = next((c for f in errors for fix in f.fixes for c in fix.commands), None)
    fix = f"; first fix: {first}" if first else ""
    return (f"olmo-doctor found {len(errors)} problem(s) that stop training on {plan_device}: {named}{fix}. "
            "`olmo-doctor check --scope train` explains each; --skip-doctor trains anyway")


def plan_device(device: str) -> str:
    """The device the gate checks for: cuda when asked, cpu when asked, and for auto: cuda when this machine has
    an NVIDIA driver (nvidia-smi on PATH, or the driver's /proc entry), else cpu. torch is not imported in this
    process to find out: whether it starts CUDA is the doctor's to judge (its worker does what training does), and
    under a memory limit an import here would fail before the gate could name the limit."""
    if device.startswith("cuda"):
        return "cuda"
    if device == "cpu":
        return "cpu"
    from olmo_doctor.isolation import which  # PATH's absolute entries: never the working folder's nvidia-smi

    # A GPU that torch cannot use is exactly what the doctor should look at, so the driver alone counts.
    return "cuda" if which("nvidia-smi") or os.path.exists("/proc/driver/nvidia/version") else "cpu"


def isolate_tool_path() -> None:
    """No tool from the working folder, for us, torch or triton (the gate's OD263 says so): PATH keeps its absolute
    entries only. Without olmo_doctor, olmo still runs (the gate then says the doctor is missing)."""
    try:
        from olmo_doctor.isolation import sanitize_process_path

        sanitize_process_path()
    except ImportError:
        pass


def kernels_measured_backend(gpu_name: str, torch_version: str) -> str | None:
    """The backend `olmo-doctor build-kernels` measured fastest for this GPU and torch (its own spelling:
    "flash-attn", "sdpa", ...), None when olmo-doctor is not there to ask."""
    try:
        from olmo_doctor.build.verify import preferred_backend
    except ImportError:
        return None
    return preferred_backend(gpu_name, torch_version)


def limit_fault(exc: BaseException) -> str | None:
    """The one line for a failure this process's own state explains: a library that could not be mapped, a
    MemoryError, a thread that could not start, under a memory limit that is set (olmo_doctor/live_faults.py);
    also behind an expected error a handler made of it (`except Exception` -> "not a tokenizer"). None otherwise."""
    try:
        from olmo_doctor.live_faults import limit_line

        return limit_line(exc)
    except Exception:  # the safety net must never be the thing that fails
        return None


def environment_fault(exc: BaseException) -> str | None:
    """One line naming the machine's fault behind an exception nothing expected (a CUDA start that fails past
    the gate, a limit hit mid-run), None otherwise (a bug keeps its traceback): what this process's own state
    says first (limit_fault), then whether the doctor's `diagnose` recognises the exception's text with some
    confidence."""
    import traceback

    line = limit_fault(exc)
    if line is not None:
        return line
    said = "".join(traceback.format_exception_only(type(exc), exc)).strip() or type(exc).__name__
    try:
        from olmo_doctor.diagnose import diagnose_text
        from olmo_doctor.live_faults import fault_line

        found = diagnose_text(said)
        top = found[0] if found else None
        if top is None or (top.confidence or 0.0) < FAULT_CONFIDENCE:
            return None
        return fault_line(said, top)
    except Exception:  # the safety net must never be the thing that fails
        return None
