"""Facts for build-kernels: the shared probes (or a report through `olmo_doctor.api`) plus the few facts a
build plan needs that `check` does not (the C++11 ABI without importing torch, ccache).

Local facts skip the torch-importing probe: a plan needs torch's version, CUDA and C++11 ABI only, which
torch/version.py and the wheel's ABI policy give in milliseconds, while an import costs ~5 s and would dominate
a cached reinstall.
"""

from __future__ import annotations

import shutil
import sys

from olmo_doctor import tables
from olmo_doctor.facts import Facts, merge


def gather(from_report: str | None = None) -> Facts:
    """Facts of this machine, or of the machine a report describes."""
    if from_report:
        from olmo_doctor.api import gather_facts

        return gather_facts(from_report=from_report)
    from olmo_doctor.probes import collect

    facts = collect(import_torch=False)
    return merge(build_extras(facts), facts)  # the probes' values win where both know a key


def build_extras(facts: Facts) -> Facts:
    """python.executable, ccache.path and torch.cxx11abi when the probes left them unknown."""
    extras: Facts = {"python.executable": sys.executable, "ccache.path": shutil.which("ccache")}
    mm = tables.major_minor(facts.get("torch.version"))
    if facts.get("torch.cxx11abi") is None and mm is not None and mm >= (2, 7) and sys.platform == "linux":
        extras["torch.cxx11abi"] = True  # every Linux torch wheel since 2.7 uses the C++11 ABI (pytorch #156896)
    return extras
