"""Verify installed kernels on the GPU and record which attention backend is faster for the trainer.

`verify(...)` runs gpucheck.py under the target interpreter, judges its numbers, and merges the outcome into
<user cache>/attention_backends.json (schema below), which `olmo` reads through `preferred_backend()`.

    {"schema": 1,
     "results": [{"gpu": "NVIDIA H200", "compute_capability": "9.0", "torch": "2.11.0+cu130",
                  "package": "flash-attn", "version": "2.8.3.post2+olmo.hd128.bf16",
                  "shape": {"batch": 4, "seq": 4096, "heads": 16, "head_dim": 128}, "dtype": "bfloat16",
                  "causal": true, "kernel_ms": 3.44, "sdpa_ms": 2.09, "max_rel_error": 0.0019,
                  "rel_error_bound": 0.02, "ok": true, "faster": "sdpa", "speedup": 1.65,
                  "measured_at": "2026-11-29T20:00:00+00:00"}]}

One result per (gpu, torch, package); a new measurement replaces the old one. `faster` is "sdpa" or the
package name; `ok` is false when the kernel's error exceeded the bound or it failed its checks, and then the
trainer must not pick it whatever its speed.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from olmo_common.atomic import atomic_write
from olmo_common.bounded.data import load_json
from olmo_doctor.build.gpucheck import CHECKS
from olmo_doctor.isolation import child_env, python_argv
from olmo_doctor.resources import user_cache_dir

WIN_MARGIN = 0.03  # a kernel must beat SDPA by 3% to be recorded as faster (run-to-run spread is ~1-2%)

SCHEMA = 1


def state_path() -> Path:
    return user_cache_dir() / "attention_backends.json"


# the numbers of gpucheck's output kept in the recorded result
_KEEP = ("gpu", "compute_capability", "torch", "version", "shape", "dtype", "causal", "kernel_ms", "sdpa_ms",
         "max_rel_error", "rel_error_bound", "local_rel_error", "uneven_rel_error", "outside_subset", "timings_s")
# (field, what it measures) of the errors held to the bound
_ERRORS = (("uneven_rel_error", "uneven-length relative error"), ("local_rel_error", "sliding-window relative error"))


def _subset_refused(outside: str, subset_text: str) -> bool:
    """A call outside the built subset raised the subset's own error."""
    return outside not in ("", "no error raised") and subset_text in outside


def _error_problems(raw: dict[str, Any]) -> list[str]:
    """Each measured error (gradients, other dtypes) over the check's bound."""
    return [f"{what} {error:.2e} exceeds the bound" for key, what in _ERRORS
            if (error := raw.get(key, 0.0)) > raw["rel_error_bound"]]


def _problems(package: str, raw: dict[str, Any], subset_dims: list[int], subset_text: str) -> list[str]:
    problems = []
    if raw["max_rel_error"] > raw["rel_error_bound"]:
        problems.append(f"relative error {raw['max_rel_error']:.2e} exceeds {raw['rel_error_bound']:.0e}")
    problems += _error_problems(raw)
    if subset_dims and not _subset_refused(str(raw.get("outside_subset", "")), subset_text):
        problems.append(f"a head dim outside the subset did not raise the subset error: {raw.get('outside_subset')}")
    if package == "xformers" and not raw.get("cuda_build"):
        problems.append("`python -m xformers.info` reports no CUDA build")
    return problems


def judge(package: str, raw: dict[str, Any], subset_dims: list[int], subset_text: str = "") -> dict[str, Any]:
    """Turn gpucheck's numbers into a recorded result with `ok`, `faster`, `speedup` and the reasons."""
    problems = _problems(package, raw, subset_dims, subset_text)
    # a kernel wins only by more than timing noise: on an H200, xformers 2.204 ms vs SDPA 2.207 ms once made
    # `auto` take xformers over a FlashAttention-3 that was 20% faster
    faster = package if raw["kernel_ms"] < raw["sdpa_ms"] * (1 - WIN_MARGIN) else "sdpa"
    return {
        **{k: raw[k] for k in _KEEP if k in raw},
        "package": package,
        "ok": not problems,
        "problems": problems,
        "faster": faster,
        "speedup": round(max(raw["sdpa_ms"], raw["kernel_ms"]) / min(raw["sdpa_ms"], raw["kernel_ms"]), 3),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def record(result: dict[str, Any], path: Path | None = None) -> Path:
    """Merge one result into the state file (atomic write)."""
    path = path or state_path()
    try:
        data = load_json(path, "build state")
        if data.get("schema") != SCHEMA:
            data = {"schema": SCHEMA, "results": []}
    except (OSError, ValueError, RecursionError):
        data = {"schema": SCHEMA, "results": []}
    same = ("gpu", "torch", "package")
    data["results"] = [r for r in data["results"] if any(r.get(k) != result.get(k) for k in same)] + [result]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1).encode())
    return path


def preferred_backend(gpu: str, torch_version: str, path: Path | None = None) -> str:
    """The fastest verified kernel package (flash-attn, flash-attn-3, xformers) that beat SDPA on this GPU and torch,
    else 'sdpa'."""
    return recorded_backend(gpu, torch_version, path) or "sdpa"


def _results(path: Path | None) -> list[Any]:
    try:
        results = load_json(path or state_path(), "build state").get("results", [])
    except (OSError, ValueError, RecursionError, AttributeError):
        return []
    return results if isinstance(results, list) else []


def recorded_backend(gpu: str, torch_version: str, path: Path | None = None) -> str | None:
    """As preferred_backend, but None when build-kernels recorded nothing for this GPU and torch (then nobody has
    measured here yet: the trainer's `auto` times the backends at its first start)."""
    here = [r for r in _results(path) if isinstance(r, dict) and (r.get("gpu"), r.get("torch")) == (gpu, torch_version)]
    if not here:
        return None
    winners = [r for r in here if r.get("ok") and r.get("faster") != "sdpa"]
    # the fastest kernel that beat SDPA; the first of equals
    return min(winners, key=lambda r: r["kernel_ms"])["package"] if winners else "sdpa"


def _during(stderr: str) -> str:
    """" during the X check": the last check the process said it was running, or ""."""
    marks = [m for m in re.findall(r"^gpucheck: running ([\w ]+)$", stderr, re.MULTILINE) if m in CHECKS]
    return f" during the {CHECKS[marks[-1]]} check" if marks else ""


def _failure(returncode: int, stderr: str) -> str:
    """The line that says why the check process failed: a signal, or the last error line of its stderr (warnings
    print source lines after their message, so the plain last line is often not the error)."""
    during = _during(stderr)
    if returncode < 0:
        return _killed(returncode, stderr, during)
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"(Error|Exception|error:|Aborted|terminate called)", ln)]
    return (errors or lines or [f"exit code {returncode}, no output"])[-1][:300] + during


def _killed(returncode: int, stderr: str, during: str) -> str:
    where = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("File ")][:1]
    return (f"the check process was killed by signal {-returncode} (a crash inside the kernel){during}"
            + (f" at {where[0]}" if where else ""))


def _argv(package: str, python: str, subset_dims: list[int], shape: str) -> list[str]:
    script = Path(__file__).with_name("gpucheck.py")
    # -X faulthandler: a crash inside a kernel prints the Python line it happened on instead of nothing
    return python_argv(python, "-X", "faulthandler", str(script), package, "--shape", shape,
                       "--subset-dims", ",".join(map(str, subset_dims)), user_paths=True)


def _judged(package: str, returncode: int, stdout: str, stderr: str, subset_dims: list[int],
            subset_text: str) -> dict[str, Any]:
    if returncode != 0:
        return {"package": package, "ok": False, "problems": [f"GPU check failed: {_failure(returncode, stderr)}"]}
    return judge(package, json.loads(stdout.strip().splitlines()[-1]), subset_dims, subset_text)


class PendingCheck:
    """A GPU check started before the package exists: it imports torch, starts CUDA and warms SDPA up while
    the kernels compile (that set-up is most of a verification's time), then waits; `finish()` runs the checks
    once the package is installed, `cancel()` ends it when the build fails."""

    def __init__(self, package: str, python: str, subset_dims: list[int], shape: str = "4,4096,16,128"):
        self.package, self.subset_dims = package, subset_dims
        self.proc = subprocess.Popen([*_argv(package, python, subset_dims, shape), "--wait"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=child_env(user_paths=True))

    def finish(self, subset_text: str = "", timeout: float = 600) -> dict[str, Any]:
        try:
            out, err = self.proc.communicate("go\n", timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            self.cancel()
            return {"package": self.package, "ok": False, "problems": [f"GPU check did not run: {e}"]}
        return _judged(self.package, self.proc.returncode, out, err, self.subset_dims, subset_text)

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def verify(
    package: str,
    python: str,
    subset_dims: list[int],
    shape: str = "4,4096,16,128",
    timeout: float = 600,
    subset_text: str = "",
) -> dict[str, Any]:
    """Run the GPU check; returns the judged result (ok False with problems on any failure)."""
    try:
        proc = subprocess.run(_argv(package, python, subset_dims, shape), capture_output=True, text=True,
                              timeout=timeout, env=child_env(user_paths=True))
    except (OSError, subprocess.SubprocessError) as e:
        return {"package": package, "ok": False, "problems": [f"GPU check did not run: {e}"]}
    return _judged(package, proc.returncode, proc.stdout, proc.stderr, subset_dims, subset_text)
