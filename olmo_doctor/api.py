"""The doctor as a library: what the CLI, `olmo train`, build-kernels and fix call.

    result = run_check(scope="train", plan_device="cuda")
    if result.has_errors: ...
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from olmo_doctor.envplan import EnvVar, recommend
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, clean
from olmo_doctor.findings import Finding, exit_code
from olmo_doctor.rules.engine import run_rules

SCOPES = ("install", "train", "all")
DEVICES = ("cuda", "cpu")


@dataclass
class CheckResult:
    facts: Facts
    findings: list[Finding]
    env: dict[str, EnvVar]
    scope: str = "all"
    elapsed_s: float = 0.0
    from_report: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def has_errors(self) -> bool:
        return exit_code(self.findings) == 1

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


def gather_facts(from_report: str | Path | None = None, deep: bool = False, plan_device: str | None = None) -> Facts:
    """Facts of this machine (probes) or of the machine a report describes."""
    if plan_device is not None and plan_device not in DEVICES:
        raise UsageError(f"unknown device '{plan_device}'; use one of {', '.join(DEVICES)}")
    if from_report is not None:
        from olmo_doctor.report import load_report

        facts = load_report(from_report)
    else:
        from olmo_doctor.probes import collect

        facts = collect(deep=deep)
    facts["plan.device"] = plan_device
    return facts


def run_check(
    scope: str = "all",
    from_report: str | Path | None = None,
    plan_device: str | None = None,
    deep: bool = False,
    facts: Facts | None = None,
    nccl: bool = False,
) -> CheckResult:
    """Probe (or replay), judge with the rules, and recommend env flags. `nccl` also runs a real all-reduce
    over the visible GPUs (seconds to minutes) and diagnoses its log when it hangs or fails."""
    if scope not in SCOPES:
        raise UsageError(f"unknown scope '{scope}'; use one of {', '.join(SCOPES)}")
    if scope == "train" and plan_device is None:
        plan_device = "cuda"  # a training check is about a GPU run unless told otherwise
    start = time.perf_counter()
    if facts is None:
        facts = gather_facts(from_report, deep=deep, plan_device=plan_device)
    else:
        facts = {**facts, "plan.device": plan_device if plan_device is not None else facts.get("plan.device")}
    log = ""
    if nccl:
        if from_report is not None:
            raise UsageError("--nccl measures this machine's GPUs; it cannot be combined with --from-report")
        from olmo_doctor.nccl.probe import probe as nccl_probe

        measured = nccl_probe(facts)
        log = str(measured.pop("nccl.log", "") or "")
        facts.update(measured)
    facts = clean(facts)  # also facts handed in by a caller, and the all-reduce's
    findings = run_rules(facts, scope=scope)
    if log and (facts.get("nccl.hang") or facts.get("nccl.error")):
        findings += _diagnose_log(log, facts, {f.code for f in findings})
    env = recommend(facts)
    return CheckResult(facts, findings, env, scope, time.perf_counter() - start,
                       str(from_report) if from_report else None)


def _diagnose_log(log: str, facts: Facts, seen: set[str]) -> list[Finding]:
    """Name the cause of a failed or hung collective from its log, when diagnose recognises one."""
    try:
        from olmo_doctor.diagnose import diagnose_text
    except ImportError:
        return []
    return [f for f in diagnose_text(log, facts)[:2] if f.code not in seen]
