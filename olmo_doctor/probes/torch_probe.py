"""torch, flash-attn, xformers and torchao facts without importing torch in this process.

The version and CUDA release come from `torch/version.py` (read as text), the packages' versions from their
dist-info. What only an imported torch can say comes from one short subprocess (probes/torch_worker.py), which
does what training does first: C++ ABI, arch list, cuDNN and NCCL versions; CUDA initialisation (with torch's own
reason when it fails), an allocation and a small matmul on every visible GPU under the current allocator config;
then each kernel's extension loaded on its own. Its answer is cached in the user cache under a key holding every
input it depends on (probes/torch_key.py: environment, resource limits, driver, device files, the libraries'
sizes and times), so the second `check` costs nothing and a changed machine is never answered from the cache.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from olmo_common.bounded.files import read_text
from olmo_doctor.facts import Facts
from olmo_doctor.isolation import child_env, python_argv
from olmo_doctor.probes import dists, torch_key
from olmo_doctor.resources import read_cache, user_cache_dir, write_cache

# dist, key, in the worker's order. torchao is not an attention kernel: `precision: fp8` multiplies through its
# torchao.float8 (olmo/nn/float8.py), and like the kernels it is checked by importing it next to this torch.
KERNELS = (("flash-attn", "flash_attn"), ("flash_attn_3", "flash_attn_3"), ("xformers", "xformers"),
           ("torchao", "torchao"))
EXTENSION_OF = {"flash_attn": "flash_attn_2_cuda", "flash_attn_3": "flash_attn_interface"}  # what the worker imports
VERSION_FIELD = re.compile(r"^(__version__|cuda|hip)\s*(?::[^=]*)?=\s*['\"]?([^'\"\n]*)['\"]?", re.M)
WORKER_SOURCE = Path(__file__).with_name("torch_worker.py")


def static_facts() -> tuple[Facts, Path | None]:
    """Facts read from files only: torch version/CUDA and the kernel packages' versions."""
    facts: Facts = {"torch.version": None, "torch.cuda": None, "torch.path": None}
    spec = find_spec("torch")
    torch_dir = Path(spec.origin).parent if spec and spec.origin else None
    if torch_dir is not None:
        facts["torch.path"] = str(torch_dir)
        try:
            fields = dict(VERSION_FIELD.findall(read_text(torch_dir / "version.py", "source file")))
            facts["torch.version"] = fields.get("__version__") or None
            cuda = fields.get("cuda")
            facts["torch.cuda"] = None if cuda in (None, "", "None") else cuda
        except OSError:
            pass
    for dist_name, key in KERNELS:
        facts[f"{key}.version"] = dists.version(dist_name)
    return facts, torch_dir


def _cache_keys(torch_dir: Path, kernels: list[str]) -> tuple[str, dict[str, str]]:
    """The key of the torch part of the answer and of each kernel's part (probes/torch_key.py). A kernel's key
    holds its installed version too, since file times alone can repeat across installs (an installer that links
    files from its cache, a restored image)."""
    dist_of = {key: dist for dist, key in KERNELS}
    torch_part = torch_key.torch_key(torch_dir)
    return torch_part, {k: torch_key.kernel_key(torch_part, k, dists.version(dist_of[k]) if k in dist_of else None,
                                                dist_of.get(k), EXTENSION_OF) for k in kernels}


def _cache_key(torch_dir: Path, kernels: list[str]) -> str:
    """One key for the whole answer (torch's part and the kernels asked for)."""
    torch_part, kernel_parts = _cache_keys(torch_dir, kernels)
    return torch_key._digest([torch_part, *(f"{k}={v}" for k, v in sorted(kernel_parts.items()))])


def _kernel_part(facts: Facts, kernel: str) -> Facts:
    return {k: v for k, v in facts.items() if k.startswith(kernel + ".")}


def _torch_part(facts: Facts) -> Facts:
    return {k: v for k, v in facts.items() if not any(k.startswith(key + ".") for _, key in KERNELS)}


def _last_facts(stdout: str) -> Facts | None:
    """The last line of WORKER's output that is a JSON object (an imported module may print lines of its own)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


TIMED_OUT = -1000  # run_worker's status for a worker that did not finish in time
NOT_STARTED = -1001  # ... and for one that could not be started


def _killed_by(returncode: int) -> str:
    if returncode == TIMED_OUT:
        return "it did not finish in time and was stopped"
    if returncode == NOT_STARTED:
        return "it could not be started"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _record_crash(facts: Facts, kernels: list[str], returncode: int) -> list[str]:
    """The worker died inside the first step it has no answer for: starting CUDA (it answers for torch first,
    then for CUDA, then for each kernel in KERNELS' order), or a kernel's import. That step is recorded as
    failed, with how the process ended. Returns the kernels never tried."""
    if "torch.cuda_available" not in facts:  # CUDA's start (or its first allocation) took the process down
        facts["torch.cuda_available"] = False
        facts["torch.cuda_init_error"] = f"starting CUDA killed the Python process ({_killed_by(returncode)})"
        return [key for _, key in KERNELS if key in kernels]
    pending = [key for _, key in KERNELS if key in kernels and f"{key}.import_ok" not in facts]
    if pending:
        facts[f"{pending[0]}.import_ok"] = False
        facts[f"{pending[0]}.import_error"] = f"importing it killed the Python process ({_killed_by(returncode)})"
    return pending[1:]


def _preload_said(stderr: str) -> str | None:
    """ld.so's line about a library LD_PRELOAD names that it could not load ("ERROR: ld.so: object '...' from
    LD_PRELOAD cannot be preloaded (...): ignored."), or None."""
    return next((line.strip()[:400] for line in stderr.splitlines() if "LD_PRELOAD cannot be preloaded" in line),
                None)


def run_worker(args: list[str], timeout: float) -> tuple[Facts | None, int]:
    """Run the worker once: its last JSON facts (None when it printed none) and its exit code (TIMED_OUT when
    it hung: a GPU in a bad state can hang CUDA's start; what it printed before is kept)."""
    try:
        # -P (-I before Python 3.11; olmo_doctor/isolation.py): the working folder is never on the worker's
        # sys.path, not even for its first `import json`; the user's PYTHONPATH keeps only its absolute entries
        source = read_text(WORKER_SOURCE, "source file")
        proc = subprocess.run(python_argv(sys.executable, "-c", source, *args, user_paths=True), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=child_env(user_paths=True))
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return _last_facts(out), TIMED_OUT
    except (OSError, subprocess.SubprocessError, ValueError) as e:  # fork/exec failed (ENOMEM under a limit)
        return {"torch.import_error": f"could not start a Python process to import torch ({e})"}, NOT_STARTED
    facts = _last_facts(proc.stdout)
    preload = _preload_said(proc.stderr)
    if facts is not None and preload and "--kernels-only" not in args:  # what ld.so says in every process
        facts["loader.preload_error"] = preload
    if facts is None and proc.returncode and "--kernels-only" not in args:
        facts = _last_words(proc)
    return facts, proc.returncode


def _last_words(proc: subprocess.CompletedProcess[str]) -> Facts:
    """A worker that died before torch answered: its last line on stderr is the reason (OpenBLAS, under torch,
    exits when it cannot reserve its buffers)."""
    said = next((line.strip() for line in reversed(proc.stderr.splitlines()) if line.strip()), "")
    return {"torch.import_error": f"{said[:400] or 'no error text'} (the Python process importing torch "
                                  f"ended: {_killed_by(proc.returncode)})"}


def _cached_parts(folder: Path, torch_part: str, kernel_parts: dict[str, str]) -> tuple[Facts | None, Facts, list[str]]:
    """(torch's cached part or None, the cached parts of the kernels, the kernels without one). A kernel's part
    counts only beside torch's: it was answered by a worker that imported that torch."""
    cached_torch = read_cache(folder / f"torch-{torch_part}.json")
    torch_facts = dict(cached_torch) if isinstance(cached_torch, dict) else None
    kernel_facts: Facts = {}
    missing = []
    for kernel, key in kernel_parts.items():
        cached = read_cache(folder / f"{kernel}-{key}.json")
        if isinstance(cached, dict) and torch_facts is not None:
            kernel_facts.update(cached)
        else:
            missing.append(kernel)
    return torch_facts, kernel_facts, missing


def _first_worker(kernels: list[str], timeout: float) -> tuple[Facts, int, list[str]] | None:
    """(the first worker's answer, its exit code, the kernels still to ask after a crash); None: no answer."""
    answer, returncode = run_worker(kernels, timeout)
    if answer is None:
        return None
    crashed = returncode and "torch.import_error" not in answer
    return answer, returncode, _record_crash(answer, kernels, returncode) if crashed else []


def _ask(kernels: list[str], torch_facts: Facts | None, timeout: float) -> tuple[Facts | None, bool]:
    """Run the worker: torch's checks and `kernels` (or the kernels only, when torch's part is known), then a
    fresh worker for the kernels after one that crashed. (its answer, None when it gave none; whether the answer
    is complete enough to cache: not after a hang or a worker that could not start)."""
    if torch_facts is None:
        first = _first_worker(kernels, timeout)
        if first is None:
            return None, False
        answer, returncode, pending = first
    else:
        answer, returncode, pending = dict(torch_facts), 0, kernels
    complete = returncode not in (TIMED_OUT, NOT_STARTED)
    while pending:  # at most one more worker per kernel, each after the one that crashed
        more, returncode = run_worker(["--kernels-only", *pending], timeout)
        if more is None or returncode == NOT_STARTED:
            return answer, complete and returncode != NOT_STARTED
        answer.update({k: v for kernel in pending for k, v in _kernel_part(more, kernel).items()})
        complete = complete and returncode != TIMED_OUT
        pending = _record_crash(answer, pending, returncode) if returncode else []
    return answer, complete


def dynamic_facts(torch_dir: Path, kernels: list[str], timeout: float = 120.0) -> Facts:
    """Ask a torch-importing worker, or the cache of its last answers for exactly these inputs: torch's part and
    each kernel's part are kept apart, so a kernel installed or replaced asks the worker about that kernel only
    (`--kernels-only`). A step that kills (or hangs) the worker is recorded as failed, and the kernels after it are
    tried in a fresh worker, so each one is judged on its own. An answer cut short by a hang is not cached: the
    next check asks again."""
    folder = user_cache_dir() / "torch-facts"
    torch_part, kernel_parts = _cache_keys(torch_dir, kernels)
    torch_facts, kernel_facts, missing = _cached_parts(folder, torch_part, kernel_parts)
    if torch_facts is not None and (not missing or torch_facts.get("torch.import_error")):
        return {**torch_facts, **kernel_facts}  # (no kernel imports where torch does not)
    answer, complete = _ask(missing, torch_facts, timeout)
    if answer is None:
        return {"torch.import_error": "could not run a Python subprocess to import torch"}
    if complete:
        _remember(folder, answer, None if torch_facts is not None else torch_part,
                  {k: kernel_parts[k] for k in missing})
    return {**kernel_facts, **answer}


def _remember(folder: Path, answer: Facts, torch_part: str | None, kernel_parts: dict[str, str]) -> None:
    """Cache torch's part of a complete answer (torch_part None: it came from the cache) and each kernel's part
    the worker answered."""
    if torch_part is not None:
        write_cache(folder / f"torch-{torch_part}.json", _torch_part(answer))
    for kernel, part in kernel_parts.items():
        if f"{kernel}.import_ok" in answer:
            write_cache(folder / f"{kernel}-{part}.json", _kernel_part(answer, kernel))


def kernel_of(package: str) -> str | None:
    """The KERNELS key of a package as build-kernels names it (flash-attn, flash-attn-3, xformers)."""
    key = re.sub(r"[-_.]+", "_", package).lower()
    return key if any(k == key for _, k in KERNELS) else None


def probe(import_torch: bool = True, skip_kernels: frozenset[str] = frozenset()) -> Facts:
    """Static facts, and the torch worker's answer (cached) about torch and each installed kernel except
    `skip_kernels`: build-kernels replaces those, so what the copy it replaces does on import is no input to
    its plan, and asking would import torch again after every install."""
    facts, torch_dir = static_facts()
    if torch_dir is None or not import_torch:
        return facts
    kernels = [k for _, k in KERNELS if facts.get(f"{k}.version") and k not in skip_kernels]
    facts.update(dynamic_facts(torch_dir, kernels))
    return facts


def auto_pick(facts: Facts) -> Facts:
    """Which kernel package `attn_backend: auto` takes on this GPU and torch without timing: the one
    `build-kernels`' GPU check recorded as faster than SDPA (olmo_doctor.build.verify), else 'sdpa'; 'timed' when
    nothing was recorded for this GPU and torch (the trainer then times the backends at its first start)."""
    gpu, version = facts.get("gpu.0.name"), facts.get("torch.version")
    if not gpu or not version:
        return {"attention.auto_pick": None}
    from olmo_doctor.build.verify import recorded_backend

    return {"attention.auto_pick": recorded_backend(str(gpu), str(version)) or "timed"}
