"""Probes gather facts and never judge. `collect()` runs them all, concurrently, and merges their facts.

Each probe module reads one source of truth (NVML, nvcc, the compiler, libc, cgroups, package metadata, torch)
and returns flat dotted facts; a missing tool gives None, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from olmo_doctor.facts import Facts, clean, merge
from olmo_doctor.run import Runner, run


def collect(runner: Runner = run, deep: bool = False, import_torch: bool = True,
            skip_kernels: Iterable[str] = ()) -> Facts:
    """All facts about this machine. `deep` adds slower checks (a real nvcc compile); `skip_kernels` are kernels
    (torch_probe.KERNELS keys) whose import the torch worker is not asked about (build-kernels replacing them)."""
    from olmo_doctor.probes import (
        compiler,
        cuda,
        env_vars,
        gpu,
        gpu_health,
        infiniband,
        libc,
        network,
        paths,
        python_env,
        search_paths,
        system,
        torch_probe,
        xid,
    )

    jobs: list[Callable[[], Facts]] = [
        lambda: gpu.probe(runner),
        lambda: cuda.probe(runner),
        lambda: compiler.probe(runner),
        libc.probe,
        system.probe,
        lambda: python_env.probe(runner),
        lambda: torch_probe.probe(import_torch, skip_kernels=frozenset(skip_kernels)),
        env_vars.probe,
        search_paths.probe,
        lambda: gpu_health.probe(runner),
        infiniband.probe,
        xid.probe,
        network.probe,
        paths.probe,
    ]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        parts = list(pool.map(_safe, jobs))
    facts = merge(*parts)
    facts.update(_safe(lambda: torch_probe.auto_pick(facts)))  # needs the GPU's and torch's facts together
    if deep:
        from olmo_doctor.probes import deep as deep_probe

        facts.update(_safe(lambda: deep_probe.probe(facts, runner)))
    return clean(facts)


def _safe(job: Callable[[], Facts]) -> Facts:
    """A probe that raises anyway (a bug, an odd machine) loses its facts, not the whole check."""
    try:
        return job()
    except Exception as e:
        return {"probe.error": " ".join(f"{type(e).__name__}: {e}".split())}  # one line, as every fact
