"""`olmo-doctor explain CODE`: a rule's documentation (what, why, example, fixes, sources); `--json` prints the same
as one JSON object.

A rule's texts are templates over facts (`{driver.version}`) and over values its condition computes
(`{planned_jobs}`). Without a machine at hand they print as named placeholders (`<driver.version>`), each
explained under "Values", followed by the rule's first firing test case rendered as a finding would be."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from olmo_doctor.errors import UsageError
from olmo_doctor.rules.model import Rule


def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain(code: str = typer.Argument(..., help="Rule code (OD101) or name."),
                json_out: Annotated[bool, typer.Option("--json", help="Print the rule as one JSON object.")] = False,
                ) -> None:
        """Explain one rule: what it checks, why it matters, and how to fix it."""
        from olmo_doctor.rules.model import find_rule

        rule = find_rule(code)
        if rule is None:
            raise UsageError(f"no rule '{code}'; `olmo-doctor rules` lists them")
        if json_out:
            typer.echo(json.dumps(rule_json(rule), indent=2))
            return
        typer.echo("\n".join(explain_lines(rule)))


def rule_json(rule: Rule) -> dict[str, Any]:
    """Everything `explain` prints about `rule`, as one JSON-able object; templates carry the same named
    placeholders as the text (`<driver.version>`), each explained under `values`."""
    from olmo_doctor.rules.engine import placeholders, render
    from olmo_doctor.rules.model import causes

    shown = placeholders(_templates(rule), NO_FACTS, {}, expressions=True)
    return {"code": rule.code, "name": rule.name, "severity": rule.severity,
            "unplanned_severity": rule.unplanned_severity, "cause": rule.cause,
            "cause_meaning": causes().get(rule.cause, ""), "scope": list(rule.scopes),
            "consequence_of": list(rule.consequence_of), "title": render(rule.title, NO_FACTS, shown),
            "example_title": _example_title(rule), "what": " ".join(rule.what.split()),
            "why": " ".join(rule.why.split()), "example": " ".join(rule.example.split()) or None, "when": rule.when,
            "condition": [line.removeprefix("Fires when: ") for line in _condition_lines(rule)],
            "checked_by_build_planner": rule.for_build,
            "fixes": [{"title": render(f.title, NO_FACTS, shown), "applicability": f.applicability,
                       "commands": [render(c, NO_FACTS, shown) for c in f.commands]} for f in rule.fixes],
            "values": _values(rule, shown),
            "signatures": [s.pattern.pattern for s in rule.signatures], "sources": list(rule.sources)}


# no machine at hand: every fact unknown (as in a report that states nothing), so `missing(x)` is not taken as true
NO_FACTS = {"facts.partial": True}


def _templates(rule: Rule) -> list[str]:
    return [rule.title, *(f.title for f in rule.fixes), *(c for f in rule.fixes for c in f.commands)]


def explain_lines(rule: Rule) -> list[str]:
    """Everything `explain` prints for one rule, with every template field shown as a named placeholder."""
    from olmo_doctor.rules.engine import placeholders, render
    from olmo_doctor.rules.model import causes

    shown = placeholders(_templates(rule), NO_FACTS, {}, expressions=True)
    out = [_heading(rule), "", render(rule.title, NO_FACTS, shown)]
    example = _example_title(rule)
    out += [f"  e.g. {example}", ""] if example else [""]
    out += [
        f"What: {' '.join(rule.what.split())}",
        f"Why: {' '.join(rule.why.split())}",
        f"Cause: {causes().get(rule.cause, '')}",
    ]
    if rule.example:
        out.append(f"Example: {' '.join(rule.example.split())}")
    out += _condition_lines(rule)
    for fix in rule.fixes:
        out.append(f"Fix ({fix.applicability}): {render(fix.title, NO_FACTS, shown)}")
        out += [f"    $ {render(c, NO_FACTS, shown)}" for c in fix.commands]
    out += _value_lines(rule, shown)
    if rule.signatures:
        out.append("Recognised in logs by: " + "; ".join(s.pattern.pattern for s in rule.signatures[:6]))
    out.append("Sources:")
    out += [f"    {s}" for s in rule.sources]
    return out


def _heading(rule: Rule) -> str:
    """CODE name  (severity, cause, scope; the finding it is shown under)."""
    return (f"{rule.code} {rule.name}  ({rule.severity}"
            + (f" where a build is planned, {rule.unplanned_severity} otherwise" if rule.unplanned_severity else "")
            + f", cause: {rule.cause}, scope: {', '.join(rule.scopes)})"
            + (f"; shown under {' or '.join(rule.consequence_of)} when that fires too" if rule.consequence_of
               else ""))


def _condition_lines(rule: Rule) -> list[str]:
    from olmo_doctor.checks import resolve

    if rule.when:
        return [f"Fires when: {rule.when}"]
    found = resolve(rule.check)
    if found is None:
        return []
    where = "as `build-kernels` or `check --scope install` plans a build: " if found.needs_build else ""
    module, _, name = found.name.partition(".")
    return [f"Fires when: {where}{found.summary} (olmo_doctor/checks/{module}.py, {name})"]


def _values(rule: Rule, shown: Mapping[str, Any]) -> dict[str, str]:
    """What fills each placeholder: a fact (its meaning from the vocabulary) or the rule's condition."""
    from olmo_doctor.facts import FACT_KEYS, documented_key

    values = {}
    for name, placeholder in shown.items():
        key = str(placeholder)[1:-1] if str(placeholder).startswith("<") else name  # a conditional: its first value
        meaning = FACT_KEYS.get(documented_key(key.replace("gpu_star.", "gpu.N.")))
        if meaning is None and rule.check:
            meaning = f"computed by the rule's condition ({rule.check})"
        values[str(placeholder)] = meaning or f"an expression over facts: {name}"
    return values


def _value_lines(rule: Rule, shown: Mapping[str, Any]) -> list[str]:
    values = _values(rule, shown)
    if not values:
        return []
    return ["Values (filled from the machine's facts in a real finding):",
            *(f"    {p}: {meaning}" for p, meaning in values.items())]


def _example_title(rule: Rule) -> str | None:
    """The title as the rule's first firing test case renders it (None for a rule without a fact case)."""
    case = next((c for c in rule.cases if c.fires), None)
    if case is None:
        return None
    try:
        findings = _case_findings(rule, case)
    except Exception:  # an example is a courtesy: never let it stop the explanation
        return None
    return findings[0].title if findings else None


def _case_findings(rule: Rule, case: Any) -> list[Any]:
    from olmo_doctor.rules.engine import fires, to_finding

    if rule.for_build:
        from olmo_doctor.build.plan import BuildRequest, plan_build
        from olmo_doctor.build.recipes import find_recipe

        req = dict(case.build)
        recipe = find_recipe(req.pop("package"))
        request = BuildRequest(package=recipe.package, jobs=req.get("jobs"), archs=tuple(req.get("archs", ())),
                               subset=req.get("subset"))
        plan = plan_build(dict(case.facts), recipe, request)
        return [f for f in plan.blockers + plan.warnings if f.code == rule.code]
    fired, extra, bound = fires(rule, case.facts)
    return [to_finding(rule, bound, extra)] if fired else []
