"""Judge facts with rules: evaluate each rule's condition and turn the ones that fire into Findings."""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from typing import Any

from olmo_doctor.facts import FactValue, gpu_indices
from olmo_doctor.findings import Finding, Fix, sort_findings
from olmo_doctor.rules.expr import Unknown, evaluate, fact_refs
from olmo_doctor.rules.model import Rule, RuleError, load_rules
from olmo_doctor.rules.registry import resolve
from olmo_doctor.shell import fill

_FORMATTER = string.Formatter()


def _bind_gpu(source: str, index: int) -> str:
    return source.replace("gpu.*.", f"gpu.{index}.")


def render(template: str, facts: Mapping[str, FactValue], extra: Mapping[str, Any] | None = None,
           as_command: bool = False) -> str:
    """Fill {expression} fields of a message or command; {{ and }} are literal braces.

    A field that cannot be evaluated (unknown fact) renders as 'unknown' rather than failing the finding.
    `as_command`: the template is a command line, so each value is quoted for where it sits (shell.fill).
    """
    pieces: list[tuple[str, str | None]] = []
    for literal, field_name, spec, _conversion in _FORMATTER.parse(template):
        pieces.append((literal, None if field_name is None else _field(field_name, spec, facts, extra)))
    return fill(pieces) if as_command else "".join(lit + (val or "") for lit, val in pieces)


def _field(name: str, spec: str | None, facts: Mapping[str, FactValue], extra: Mapping[str, Any] | None) -> str:
    if extra and name in extra:
        return format(extra[name], spec) if spec else str(extra[name])
    try:
        value = evaluate(name, facts)
        if spec:  # {nccl.efficiency * 100:.0f}
            return format(value, spec)
    except (Unknown, ValueError, TypeError):
        value = "unknown"
    return ", ".join(value) if isinstance(value, list) else str(value)


def _call_check(rule: Rule, facts: Mapping[str, FactValue]) -> dict[str, Any] | None:
    """A code rule: `check = "name"` looked up in the package's own registry (never imported); context or None."""
    func = resolve(rule.check)
    if func is None:  # the loader refuses these; a Rule built by hand must not reach an import either
        raise RuleError(f"{rule.code}: check {rule.check!r} is not a registered check function")
    result = func(facts)
    if result is None or result is False:
        return None
    return dict(result) if isinstance(result, Mapping) else {}


def fires(rule: Rule, facts: Mapping[str, FactValue]) -> tuple[bool, dict[str, Any], Mapping[str, FactValue]]:
    """Does the rule fire? Returns (fired, extra template values, the facts to render with)."""
    if rule.check is not None:
        ctx = _call_check(rule, facts)
        return ctx is not None, ctx or {}, facts
    if rule.when is None:  # a log-only rule: diagnose uses its signatures, check never fires it
        return False, {}, facts
    if any(ref.startswith("gpu.*.") for ref in fact_refs(rule.when)):
        for i in gpu_indices(facts):
            try:
                if evaluate(_bind_gpu(rule.when, i), facts):
                    prefix = f"gpu.{i}."
                    bound = {"gpu_star." + k[len(prefix) :]: v for k, v in facts.items() if k.startswith(prefix)}
                    return True, {"gpu": i}, {**facts, **bound}
            except Unknown:
                continue
        return False, {}, facts
    try:
        return bool(evaluate(rule.when, facts)), {}, facts
    except Unknown:
        return False, {}, facts


def _gpu_aware(template: str) -> str:
    # messages refer to the GPU that fired as gpu.*.name; `fires` bound its facts as gpu_star.*
    return template.replace("gpu.*.", "gpu_star.")


def to_finding(rule: Rule, facts: Mapping[str, FactValue], extra: Mapping[str, Any], scope: str = "install"
               ) -> Finding:
    fixes = [
        Fix(
            title=render(_gpu_aware(f.title), facts, extra),
            applicability=f.applicability,  # type: ignore[arg-type]
            commands=[render(_gpu_aware(c), facts, extra, as_command=True) for c in f.commands],
            action=_render_action(f.action, facts, extra),
        )
        for f in rule.fixes
    ]
    return Finding(
        code=rule.code,
        cause=rule.cause,
        severity=rule.severity_for(scope),  # type: ignore[arg-type]
        title=render(_gpu_aware(rule.title), facts, extra),
        message=render(_gpu_aware(rule.message), facts, extra),
        fixes=fixes,
        name=rule.name,
        why=rule.why.strip(),
        sources=list(rule.sources),
    )


def build_finding(code: str, facts: Mapping[str, FactValue], **extra: Any) -> Finding:
    """The finding of build rule `code` (scope build), which olmo_doctor/build/checks.py decided fires; `extra`
    fills the template fields the facts do not hold (the package, its recipe's minimums, the job sizing)."""
    rule = next((r for r in load_rules() if r.code == code), None)
    if rule is None or not rule.for_build:
        raise LookupError(f"no build rule {code} in known_issues/ (a BK rule with scope [\"build\"])")
    return to_finding(rule, facts, extra)


def _render_action(action: Any, facts: Mapping[str, FactValue], extra: Mapping[str, Any]) -> Any:
    if action is None:
        return None
    if isinstance(action, str):
        return render(_gpu_aware(action), facts, extra)
    if isinstance(action, list):
        return [_render_action(a, facts, extra) for a in action]
    if isinstance(action, dict):
        return {k: _render_action(v, facts, extra) for k, v in action.items()}
    return action


def run_rules(
    facts: Mapping[str, FactValue], scope: str = "all", rules: Iterable[Rule] | None = None
) -> list[Finding]:
    """Every finding the rules produce for these facts, errors first. A finding whose rule names another fired
    rule in `consequence_of` gets that root's code in `root` (followed to the top, so chains stay one level)."""
    findings, fired_rules = [], {}
    for rule in rules if rules is not None else load_rules():
        if not rule.in_scope(scope):
            continue
        fired, extra, bound = fires(rule, facts)
        if fired:
            findings.append(to_finding(rule, bound, extra, scope))
            fired_rules[rule.code] = rule
    for finding in findings:
        finding.root = _root_of(fired_rules[finding.code], fired_rules)
    return sort_findings(findings)


def _root_of(rule: Rule, fired: Mapping[str, Rule]) -> str | None:
    """The topmost fired rule this one is a consequence of (None when it is a root itself)."""
    seen = {rule.code}
    root: str | None = None
    current = rule
    while True:
        parent = next((c for c in current.consequence_of if c in fired and c not in seen), None)
        if parent is None:
            return root
        root, current = parent, fired[parent]
        seen.add(parent)
