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
from olmo_doctor.rules.engine import link_roots, run_rules

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
    facts, extra = _gather(facts, from_report, plan_device, deep)
    log = _all_reduce(facts, from_report) if nccl else ""
    facts = clean(facts)  # also facts handed in by a caller, and the all-reduce's
    findings = _judge(facts, scope, log)
    env = recommend(facts)
    if from_report is not None:
        from olmo_doctor.rules.unjudged import not_judged

        extra["not_judged"] = not_judged(facts, scope)
    return CheckResult(facts, findings, env, scope, time.perf_counter() - start,
                       str(from_report) if from_report else None, extra)


def _gather(facts: Facts | None, from_report: str | Path | None, plan_device: str | None,
            deep: bool) -> tuple[Facts, dict[str, object]]:
    """The facts to judge: handed in by the caller, read from a report, or probed on this machine."""
    if facts is not None:
        return {**facts, "plan.device": plan_device if plan_device is not None else facts.get("plan.device")}, {}
    if from_report is not None:
        return _report(from_report, plan_device)
    return gather_facts(from_report, deep=deep, plan_device=plan_device), {}


def _all_reduce(facts: Facts, from_report: str | Path | None) -> str:
    """Run a real all-reduce over this machine's GPUs, adding what it measured to facts; its log."""
    if from_report is not None:
        raise UsageError("--nccl measures this machine's GPUs; it cannot be combined with --from-report")
    from olmo_doctor.nccl.probe import probe as nccl_probe

    measured = nccl_probe(facts)
    log = str(measured.pop("nccl.log", "") or "")
    facts.update(measured)
    return log


def _judge(facts: Facts, scope: str, log: str) -> list[Finding]:
    """The rules' findings, the build refusals for an install check, and the cause a failed all-reduce's log names."""
    findings = run_rules(facts, scope=scope)
    if scope == "install":  # the refusals `build-kernels --package all` would give, BK codes included
        from olmo_doctor.build.verdict import build_findings

        findings = link_roots(findings + build_findings(facts, findings))
    if log and (facts.get("nccl.hang") or facts.get("nccl.error")):
        findings += _diagnose_log(log, facts, {f.code for f in findings})
    return findings


def _report(path: str | Path, plan_device: str | None) -> tuple[Facts, dict[str, object]]:
    """Facts of a report and, for `--json`, the line each was read from."""
    if plan_device is not None and plan_device not in DEVICES:
        raise UsageError(f"unknown device '{plan_device}'; use one of {', '.join(DEVICES)}")
    from olmo_doctor.report import read_report

    facts, sources = read_report(path)
    facts["plan.device"] = plan_device
    return facts, {"sources": {k: v.to_json() for k, v in sources.items()}}


def _diagnose_log(log: str, facts: Facts, seen: set[str]) -> list[Finding]:
    """Name the cause of a failed or hung collective from its log, when diagnose recognises one."""
    try:
        from olmo_doctor.diagnose import diagnose_text
    except ImportError:
        return []
    return [f for f in diagnose_text(log, facts)[:2] if f.code not in seen]
