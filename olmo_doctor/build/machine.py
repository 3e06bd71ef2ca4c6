"""Facts for build-kernels: the shared probes (or a report through `olmo_doctor.api`) plus the few facts a
build plan needs that `check` does not (the C++11 ABI without importing torch, ccache).

Local facts are exactly `check`'s, the torch worker's included (cached under a key of everything it depends on,
so only the first run after a change pays for the import): `build-kernels` and `check --scope install` judge
the same facts and refuse for the same reasons.
"""

from __future__ import annotations

import sys

from olmo_doctor.compat.release import major_minor
from olmo_doctor.facts import Facts, merge
from olmo_doctor.isolation import which


def gather(from_report: str | None = None, replacing: tuple[str, ...] = ()) -> Facts:
    """Facts of this machine, or of the machine a report describes. `replacing`: the packages a real build
    installs; the torch worker is not asked whether their current copies import (installed-kernel findings never
    refuse a build, and that copy is about to be replaced), so a cached reinstall imports nothing: torch's own
    answer is cached under a key an install of a kernel does not change (probes/torch_key.py)."""
    if from_report:
        from olmo_doctor.api import gather_facts

        return gather_facts(from_report=from_report)
    from olmo_doctor.probes import collect
    from olmo_doctor.probes.torch_probe import kernel_of

    skip = {k for p in replacing if (k := kernel_of(p)) is not None}
    facts = collect(skip_kernels=skip)  # the facts `check --scope install` judges (the worker's answer is cached)
    return merge(build_extras(facts), facts)  # the probes' values win where both know a key


def build_extras(facts: Facts) -> Facts:
    """python.executable, ccache.path and torch.cxx11abi when the probes left them unknown."""
    extras: Facts = {"python.executable": sys.executable, "ccache.path": which("ccache")}
    mm = major_minor(facts.get("torch.version"))
    if facts.get("torch.cxx11abi") is None and mm is not None and mm >= (2, 7) and sys.platform == "linux":
        extras["torch.cxx11abi"] = True  # every Linux torch wheel since 2.7 uses the C++11 ABI (pytorch #156896)
    return extras
