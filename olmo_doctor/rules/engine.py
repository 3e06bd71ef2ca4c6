"""Judge facts with rules: evaluate each rule's condition and turn the ones that fire into Findings."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

from olmo_doctor.checks import resolve
from olmo_doctor.facts import FactValue, gpu_indices
from olmo_doctor.findings import Finding, Fix, sort_findings
from olmo_doctor.rules.expr import Unknown, evaluate, fact_refs
from olmo_doctor.rules.model import Rule, RuleError, load_rules
from olmo_doctor.shell import fill

_FORMATTER = string.Formatter()


def _bind_gpu(source: str, index: int) -> str:
    return source.replace("gpu.*.", f"gpu.{index}.")


def render(template: str, facts: Mapping[str, FactValue], extra: Mapping[str, Any] | None = None,
           as_command: bool = False) -> str:
    """Fill {expression} fields of a message or command; {{ and }} are literal braces.

    A field that cannot be evaluated (unknown fact) renders as 'unknown' rather than failing the finding.
    `as_command`: the template is a command line, so each value is quoted for where it sits (shell.fill).
    A list a rule's condition computed (`{requirements}`) is several words on a command line (each quoted on its
    own) and a comma-separated list in text.
    """
    pieces: list[tuple[str, str | list[str] | None]] = []
    for literal, field_name, spec, _conversion in _FORMATTER.parse(template):
        value = None if field_name is None else _field(field_name, spec, facts, extra, as_command)
        pieces.append((literal, value))
    if as_command:
        return fill(pieces)
    return "".join(lit + (", ".join(val) if isinstance(val, list) else val or "") for lit, val in pieces)


def _extra_field(value: Any, spec: str | None, words: bool) -> str | list[str]:
    """A value a code check computed: a list is several words on a command line, a comma-separated list in text."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value] if words else ", ".join(str(v) for v in value)
    return format(value, spec) if spec else str(value)


def _field(name: str, spec: str | None, facts: Mapping[str, FactValue], extra: Mapping[str, Any] | None,
           words: bool = False) -> str | list[str]:
    if extra and name in extra:
        return _extra_field(extra[name], spec, words)
    try:
        value = evaluate(name, facts)
        if callable(value):  # a function's name (`{cc}`) used as a field nobody filled
            raise Unknown(name)
        if spec:  # {nccl.efficiency * 100:.0f}
            return format(value, spec)
    except (Unknown, ValueError, TypeError):
        value = "unknown"
    return ", ".join(value) if isinstance(value, list) else str(value)


_SIMPLE = re.compile(r"^[A-Za-z_]\w*(?:\.(?:\w+|\*))*$")


def fields(template: str) -> list[str]:
    """The {field} names of a template, in order ({{ and }} are literal braces)."""
    return [f for _, f, _, _ in _FORMATTER.parse(template) if f]


def _has_value(name: str, facts: Mapping[str, FactValue], expressions: bool) -> bool:
    """Does the field evaluate to a value over these facts (so needs no placeholder)? `explain` (expressions)
    names every field: some read the machine itself (torch_index())."""
    if expressions:
        return False
    try:
        return not callable(evaluate(name, facts))  # `{cc}`: a value, not cc()
    except Exception:  # Unknown, or not an expression over facts (a value a code check computes)
        return False


def placeholders(templates: Iterable[str], facts: Mapping[str, FactValue], extra: dict[str, Any],
                 named: Mapping[str, str] | None = None, expressions: bool = False) -> dict[str, Any]:
    """Fill `extra` with what each template field that cannot be evaluated shows instead of 'unknown': the
    rule's own word for it (`named`, e.g. `[diagnose] placeholders`), `<fact.key>` for a fact, `<?>` for an
    expression (`<the expression>` with `expressions`). Used where no machine's facts are at hand: a log's
    diagnosis, `explain`."""
    named = named or {}
    for template in templates:
        for name in fields(_gpu_aware(template)):
            if name not in extra and not _has_value(name, facts, expressions):
                extra[name] = named.get(name) or _shown_as(name, expressions)
    return extra


def _shown_as(name: str, expressions: bool) -> str:
    """`<fact.key>` for a fact, `<the expression>` with `expressions`, else `<?>`."""
    return placeholder_name(name) if _SIMPLE.match(name) or expressions else "<?>"


def placeholder_name(field: str) -> str:
    """How a template field shows without a machine: `<driver.version>`; a conditional field by what it shows
    when its condition holds (`{driver.version if stated(driver.version) else ...}` -> `<driver.version>`)."""
    import ast

    try:
        node = ast.parse(field, mode="eval").body
    except SyntaxError:
        node = None
    while isinstance(node, ast.IfExp):
        node = node.body
    if node is not None and _joined_text(node):  # literal text joined to a value (`' ' + xformers.version`)
        return "".join(str(p.value) if isinstance(p, ast.Constant) else placeholder_name(ast.unparse(p))
                       for p in _joined_text(node))
    shown = ast.unparse(node) if node is not None else field
    return f"<{shown.replace('gpu_star.', 'gpu.N.')}>"


def _joined_text(node: Any) -> list[Any]:
    """The parts of `'text' + value + 'text'` when at least one is literal text, else []."""
    import ast

    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return []
    parts = (_joined_text(node.left) or [node.left]) + (_joined_text(node.right) or [node.right])
    has_text = any(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts)
    return parts if has_text else []


def _call_check(rule: Rule, facts: Mapping[str, FactValue], build: Any = None) -> dict[str, Any] | None:
    """A code rule: `check = "name"` looked up in olmo_doctor/checks/' registry (never imported); context or None.
    A build condition is judged only with the planner's BuildContext (`build`): without one it stays quiet."""
    found = resolve(rule.check)
    if found is None or found.needs_build != rule.for_build:  # the loader refuses these; so does the engine
        raise RuleError(f"{rule.code}: check {rule.check!r} is not a registered check function of its kind")
    if found.needs_build and build is None:  # a build rule outside a planned build
        return None
    return _context(found.func(facts, build) if found.needs_build else found.func(facts))


def _context(result: object) -> dict[str, Any] | None:
    """A check's answer as a finding's context: None or False is quiet, a mapping its fields, anything else {}."""
    if result is None or result is False:
        return None
    return dict(result) if isinstance(result, Mapping) else {}


def _fires_on_a_gpu(rule: Rule, facts: Mapping[str, FactValue]
                    ) -> tuple[bool, dict[str, Any], Mapping[str, FactValue]]:
    """A `gpu.*.` condition, tried GPU by GPU: the first GPU it holds on is bound as gpu_star.* for the text."""
    assert rule.when is not None
    for i in gpu_indices(facts):
        try:
            if evaluate(_bind_gpu(rule.when, i), facts):
                prefix = f"gpu.{i}."
                bound = {"gpu_star." + k[len(prefix) :]: v for k, v in facts.items() if k.startswith(prefix)}
                return True, {"gpu": i}, {**facts, **bound}
        except Unknown:
            continue
    return False, {}, facts


def fires(rule: Rule, facts: Mapping[str, FactValue], build: Any = None
          ) -> tuple[bool, dict[str, Any], Mapping[str, FactValue]]:
    """Does the rule fire? Returns (fired, extra template values, the facts to render with). `build`: the
    planner's BuildContext, which the build rules' conditions need."""
    if rule.check is not None:
        ctx = _call_check(rule, facts, build)
        return ctx is not None, ctx or {}, facts
    if rule.when is None:  # a log-only rule: diagnose uses its signatures, check never fires it
        return False, {}, facts
    if any(ref.startswith("gpu.*.") for ref in fact_refs(rule.when)):
        return _fires_on_a_gpu(rule, facts)
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


def run_build_rules(facts: Mapping[str, FactValue], build: Any, rules: Iterable[Rule] | None = None
                    ) -> list[Finding]:
    """The findings of the build rules (scope build) for one planned build, errors first: their conditions
    (olmo_doctor/checks/build.py) read the planner's BuildContext, whose recipe and sizing fill their templates."""
    findings = []
    for rule in rules if rules is not None else load_rules():
        if rule.for_build:
            fired, extra, bound = fires(rule, facts, build)
            if fired:
                findings.append(to_finding(rule, bound, extra, "install"))
    return sort_findings(findings)


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


def link_roots(findings: list[Finding]) -> list[Finding]:
    """`run_rules`' root links over findings gathered from more than one pass (check --scope install adds the
    build rules' findings to the install rules'), errors first."""
    by_code = {r.code: r for r in load_rules()}
    fired = {f.code: by_code[f.code] for f in findings if f.code in by_code}
    for finding in findings:
        if finding.code in fired:
            finding.root = _root_of(fired[finding.code], fired)
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
