"""Conditions on the folders training and builds write into (probes/paths.py tried each one)."""

from __future__ import annotations

from collections.abc import Mapping

from olmo_doctor.checks import Context, fact_check
from olmo_doctor.facts import FactValue


def _unusable(facts: Mapping[str, FactValue], key: str, variable: str) -> Context:
    error = facts.get(f"paths.{key}_error")
    if not isinstance(error, str) or not error:
        return None
    return {"folder": facts.get(f"paths.{key}") or "unknown", "folder_error": error, "variable": variable}


@fact_check
def inductor_cache_unusable(facts: Mapping[str, FactValue]) -> Context:
    """torch.compile's cache folder cannot be created, written, or executed from."""
    return _unusable(facts, "inductor_cache", "TORCHINDUCTOR_CACHE_DIR")


@fact_check
def triton_cache_unusable(facts: Mapping[str, FactValue]) -> Context:
    """Triton's cache folder cannot be used, on a GPU plan (Triton compiles only for GPUs)."""
    if facts.get("plan.device") == "cpu":
        return None
    return _unusable(facts, "triton_cache", "TRITON_CACHE_DIR")


@fact_check
def tmpdir_unusable(facts: Mapping[str, FactValue]) -> Context:
    """TMPDIR names a folder that does not exist or cannot be written."""
    error = facts.get("paths.tmpdir_error")
    if not isinstance(error, str) or not error:
        return None
    return {"tmpdir": facts.get("env.TMPDIR") or "unknown", "folder_error": error}
