"""Which rules could not judge a report, and for lack of which facts.

A probe states every fact it looks at, so every rule decides. A report states some: a rule whose condition needs a
fact the report left out is neither fired nor cleared, and a verdict that stays silent about it reads like "fine".
`not_judged` names, per missing fact, the rules that could not run ("could not judge: nvcc.version (not stated):
OD110, OD111, OD120"), so the reader knows what the report must add. A rule whose condition is decided by what the
report does state (`known(torch.cuda) and ...` with a CPU torch) is judged, not listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from olmo_doctor.facts import FactValue, gpu_indices
from olmo_doctor.rules.expr import fact_refs, truth
from olmo_doctor.rules.model import Rule, load_rules

# The facts a report can state (collect_env, tool outputs, prose): a rule kept from judging by one of these is
# worth naming. Facts only a probe measures (GPU health, NCCL runs, limits, disks, the fleet) are left out: no
# report states them, and listing their rules would bury the ones the reader can do something about.
REPORTABLE = {
    "gpu.count", "gpu.N.name", "gpu.N.compute_capability", "driver.version", "driver.cuda_version", "nvcc.version",
    "gcc.version", "glibc.version", "python.version", "pip.version", "setuptools.version", "ninja.version",
    "torch.version", "torch.cuda", "torch.cuda_available", "cudnn.version", "flash_attn.version",
    "flash_attn_3.version", "xformers.version", "torchao.version", "os.wsl",
}
# a presence test reads a fact without needing it: `not known(python.unmet_requirements)` holds on any report
_PRESENCE = re.compile(r"\b(?:known|stated|default)\(\s*[\w.*]+")


def _needed(when: str) -> list[str]:
    return fact_refs(_PRESENCE.sub("", when))


def _unstated(refs: list[str], facts: Mapping[str, FactValue]) -> list[str]:
    """The referenced facts a report left out; a per-GPU fact counts once, as gpu.N.<field>."""
    out = []
    for ref in refs:
        if ref.startswith("gpu.*."):
            indices = gpu_indices(facts)
            if not indices:
                out.append("gpu.count")
            elif any(ref.replace("gpu.*.", f"gpu.{i}.") not in facts for i in indices):
                out.append(ref.replace("gpu.*.", "gpu.N."))
        elif ref not in facts:
            out.append(ref)
    return list(dict.fromkeys(out))


def _undecided(rule: Rule, facts: Mapping[str, FactValue]) -> bool:
    assert rule.when is not None
    if any(ref.startswith("gpu.*.") for ref in fact_refs(rule.when)):
        indices = gpu_indices(facts)
        return not indices or any(truth(rule.when.replace("gpu.*.", f"gpu.{i}."), facts) is None for i in indices)
    return truth(rule.when, facts) is None


def not_judged(facts: Mapping[str, FactValue], scope: str = "all",
               rules: Iterable[Rule] | None = None) -> dict[str, list[str]]:
    """fact key -> codes of the rules it kept from judging (empty unless the facts come from a report)."""
    if facts.get("facts.partial") is not True:
        return {}
    out: dict[str, list[str]] = {}
    for rule in rules if rules is not None else load_rules():
        for key in _kept_from_judging(rule, scope, facts):
            out.setdefault(key, []).append(rule.code)
    return dict(sorted(out.items()))


def _kept_from_judging(rule: Rule, scope: str, facts: Mapping[str, FactValue]) -> list[str]:
    """The reportable facts a report left out that keep this rule from deciding (none: it decided, or it is not
    judged on a report at this scope)."""
    if rule.when is None or not rule.in_scope(scope) or rule.for_build:
        return []
    missing = [k for k in _unstated(_needed(rule.when), facts) if k in REPORTABLE]
    return missing if missing and _undecided(rule, facts) else []
