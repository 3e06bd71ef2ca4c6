"""`check --deep`: compile a one-line CUDA file with the planned host compiler and arch flags.

This catches what tables cannot: a host compiler nvcc rejects, headers that clash with the system glibc, a
broken CUDA_HOME. It costs a second or two, so it only runs when asked.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from olmo_doctor.compat.nvcc import cc_to_sm
from olmo_doctor.facts import Facts, gpu_indices
from olmo_doctor.run import Runner

SOURCE = "#include <cuda_runtime.h>\n__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n"


def arch_flags(facts: Facts) -> list[str]:
    sms = sorted({sm for i in gpu_indices(facts) if (sm := cc_to_sm(facts.get(f"gpu.{i}.compute_capability")))})
    return [f"-gencode=arch=compute_{sm},code=sm_{sm}" for sm in sms]


def probe(facts: Facts, run: Runner) -> Facts:
    nvcc = facts.get("nvcc.path")
    if not isinstance(nvcc, str):
        return {"deep.nvcc_compile_ok": None, "deep.nvcc_compile_error": None}
    with tempfile.TemporaryDirectory(prefix="olmo-doctor-") as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text(SOURCE)
        argv = [nvcc, "-c", str(src), "-o", os.path.join(tmp, "probe.o"), *arch_flags(facts)]
        if isinstance(facts.get("gcc.path"), str):
            argv += ["-ccbin", str(facts["gcc.path"])]
        out = run(argv)
    if out.ok:
        return {"deep.nvcc_compile_ok": True, "deep.nvcc_compile_error": None}
    return {"deep.nvcc_compile_ok": False, "deep.nvcc_compile_error": _first_error(out.stderr, out.stdout)}


def _first_error(stderr: str, stdout: str) -> str:
    """nvcc's first error line, else its stderr."""
    lines = [ln for ln in (stderr + stdout).splitlines() if "error" in ln.lower()] or [stderr.strip()]
    return (lines[0] if lines else "nvcc failed")[:300]
