"""`olmo-doctor explain CODE`: a rule's documentation (what, why, example, fixes, sources)."""

from __future__ import annotations

import typer

from olmo_doctor.errors import UsageError


def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain(code: str = typer.Argument(..., help="Rule code (OD101) or name.")) -> None:
        """Explain one rule: what it checks, why it matters, and how to fix it."""
        from olmo_doctor.rules.model import causes, find_rule

        rule = find_rule(code)
        if rule is None:
            raise UsageError(f"no rule '{code}'; `olmo-doctor rules` lists them")
        out = [
            f"{rule.code} {rule.name}  ({rule.severity}"
            + (f" where a build is planned, {rule.unplanned_severity} otherwise" if rule.unplanned_severity else "")
            + f", cause: {rule.cause}, scope: {', '.join(rule.scopes)})"
            + (f"; shown under {' or '.join(rule.consequence_of)} when that fires too" if rule.consequence_of else ""),
            "",
            rule.title,
            "",
            f"What: {' '.join(rule.what.split())}",
            f"Why: {' '.join(rule.why.split())}",
            f"Cause: {causes().get(rule.cause, '')}",
        ]
        if rule.example:
            out.append(f"Example: {' '.join(rule.example.split())}")
        if rule.when:
            out.append(f"Fires when: {rule.when}")
        elif rule.for_build:  # the condition needs the recipe and the job sizing, so it is code, not `when`
            out.append("Checked by: olmo-doctor build-kernels, as it plans a build (olmo_doctor/build/checks.py)")
        for fix in rule.fixes:
            out.append(f"Fix ({fix.applicability}): {fix.title}")
            out += [f"    $ {c}" for c in fix.commands]
        if rule.signatures:
            out.append("Recognised in logs by: " + "; ".join(s.pattern.pattern for s in rule.signatures[:6]))
        out.append("Sources:")
        out += [f"    {s}" for s in rule.sources]
        typer.echo("\n".join(out))
