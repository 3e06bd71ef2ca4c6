"""Environment variables that change how builds and NCCL behave, recorded as env.NAME facts."""

from __future__ import annotations

import os

from olmo_doctor.facts import FACT_KEYS, Facts

WATCHED = sorted(k.split(".", 1)[1] for k in FACT_KEYS if k.startswith("env."))


def probe() -> Facts:
    return {f"env.{name}": os.environ.get(name) for name in WATCHED}
