"""Rules as data: load and validate known_issues/*.toml (schema: known_issues/SCHEMA.md)."""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from olmo_doctor.findings import SEVERITY_ORDER
from olmo_doctor.resources import data_dir, read_cache, user_cache_dir, write_cache
from olmo_doctor.rules.expr import ExprError, compile_expr

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCOPES = ("install", "train")
APPLICABILITY = ("safe", "unsafe", "manual")
_CODE = re.compile(r"^OD\d{3}$")


class RuleError(ValueError):
    """A rules file breaks the schema; the message names the file and the field."""


@dataclass(frozen=True)
class FixSpec:
    title: str
    applicability: str
    commands: tuple[str, ...] = ()
    action: dict[str, Any] | None = None


@dataclass(frozen=True)
class Signature:
    """A log pattern for `diagnose`; `weight` says how strongly a match points at this rule's cause.

    The regex compiles on first use: `check` never needs the few hundred signatures, and compiling them all would
    cost it ~30 ms. tests/test_rules.py compiles every one, so a bad pattern still fails CI."""

    source: str
    flags: int = re.I
    weight: float = 1.0
    role: str = "cause"  # "cause": the root error itself; "symptom": a downstream line that only corroborates

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)


@dataclass(frozen=True)
class Case:
    facts: dict[str, Any]
    fires: bool
    scope: str | None = None


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    cause: str
    severity: str
    scopes: tuple[str, ...]
    title: str
    message: str
    when: str | None
    check: str | None
    what: str
    why: str
    example: str
    fixes: tuple[FixSpec, ...]
    signatures: tuple[Signature, ...]
    sources: tuple[str, ...]
    cases: tuple[Case, ...]
    path: Path = field(compare=False)
    diagnose: dict[str, Any] = field(default_factory=dict, compare=False)
    # severity where no build is planned (plain `check`, `--scope train`); None: `severity` everywhere
    unplanned_severity: str | None = None
    # codes of rules whose finding, when it fires too, is the root cause of this one (shown nested beneath it)
    consequence_of: tuple[str, ...] = ()

    def in_scope(self, scope: str) -> bool:
        return scope == "all" or scope in self.scopes

    def severity_for(self, scope: str) -> str:
        """`severity` where a build is planned (`--scope install`, build-kernels), else `unplanned_severity`."""
        return self.severity if scope == "install" or self.unplanned_severity is None else self.unplanned_severity


@lru_cache(maxsize=1)
def causes() -> dict[str, str]:
    """The cause vocabulary: slug -> meaning, read from known_issues/CAUSES.md's table."""
    text = (data_dir("known_issues") / "CAUSES.md").read_text()
    rows = dict(re.findall(r"^\|\s*([a-z0-9_]+)\s*\|\s*(.+?)\s*\|\s*$", text, re.M))
    rows.pop("cause", None)  # the table's header row
    return rows


def _req(data: dict[str, Any], key: str, path: Path, kind: type = str) -> Any:
    if key not in data or not isinstance(data[key], kind):
        raise RuleError(f"{path.name}: '{key}' is required and must be a {kind.__name__}")
    return data[key]


def parse_rule(data: dict[str, Any], path: Path) -> Rule:
    code = _req(data, "code", path)
    if not _CODE.match(code):
        raise RuleError(f"{path.name}: code '{code}' must look like OD123")
    if not path.name.startswith(code):
        raise RuleError(f"{path.name}: file name must start with the rule code {code}")
    cause = _req(data, "cause", path)
    if cause not in causes():
        raise RuleError(f"{path.name}: cause '{cause}' is not in known_issues/CAUSES.md")
    severity = _req(data, "severity", path)
    if severity not in SEVERITY_ORDER:
        raise RuleError(f"{path.name}: severity must be error, warning or info")
    unplanned = data.get("unplanned_severity")
    if unplanned is not None and unplanned not in SEVERITY_ORDER:
        raise RuleError(f"{path.name}: unplanned_severity must be error, warning or info")
    roots = data.get("consequence_of", [])
    if not isinstance(roots, list) or any(not isinstance(c, str) or not _CODE.match(c) or c == code for c in roots):
        raise RuleError(f"{path.name}: consequence_of must be a list of other rule codes, e.g. [\"OD110\"]")
    scopes = data.get("scope", list(SCOPES))
    scopes = [scopes] if isinstance(scopes, str) else scopes
    if not scopes or any(s not in SCOPES for s in scopes):
        raise RuleError(f"{path.name}: scope must be a subset of {SCOPES}")
    when, check = data.get("when"), data.get("check")
    if (when is None) == (check is None) and not data.get("signature"):
        raise RuleError(f"{path.name}: give exactly one of 'when' (an expression) or 'check' (a function name)")
    if check is not None:
        from olmo_doctor.rules.registry import resolve

        if resolve(check) is None:
            raise RuleError(f"{path.name}: check {check!r} is not a registered check function "
                            "(olmo_doctor/rules/registry.py lists them)")
    if when is not None:
        try:
            compile_expr(when)
        except ExprError as e:
            raise RuleError(f"{path.name}: when: {e}") from None
    doc = data.get("doc", {})
    fixes = []
    for i, fx in enumerate(data.get("fix", [])):
        app = fx.get("applicability")
        if app not in APPLICABILITY:
            raise RuleError(f"{path.name}: fix[{i}].applicability must be one of {APPLICABILITY}")
        if app != "manual" and "action" not in fx:
            raise RuleError(f"{path.name}: fix[{i}] is {app} but has no typed 'action' for fix --apply")
        fixes.append(FixSpec(_req(fx, "title", path), app, tuple(fx.get("commands", [])), fx.get("action")))
    sigs = []
    for sg in data.get("signature", []):
        flags = re.I if sg.get("ignore_case", True) else 0
        sigs.append(Signature(_req(sg, "pattern", path), flags, float(sg.get("weight", 1.0)), sg.get("role", "cause")))
    cases = []
    for i, tc in enumerate(data.get("test", [])):
        for key, fires in (("fires", True), ("quiet", False)):
            if key in tc:
                cases.append(Case(dict(tc[key]), fires, tc.get("scope")))
        if "fires" not in tc and "quiet" not in tc:
            raise RuleError(f"{path.name}: test[{i}] needs 'fires' or 'quiet'")
    sources = data.get("sources", [])
    if not sources:
        raise RuleError(f"{path.name}: every rule needs at least one source")
    return Rule(
        code=code,
        name=_req(data, "name", path),
        cause=cause,
        severity=severity,
        scopes=tuple(scopes),
        title=_req(data, "title", path),
        message=_req(data, "message", path),
        when=when,
        check=check,
        what=doc.get("what", ""),
        why=doc.get("why", ""),
        example=doc.get("example", ""),
        fixes=tuple(fixes),
        signatures=tuple(sigs),
        sources=tuple(sources),
        cases=tuple(cases),
        path=path,
        diagnose=dict(data.get("diagnose", {})),
        unplanned_severity=unplanned,
        consequence_of=tuple(roots),
    )


def load_file(path: Path) -> Rule:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise RuleError(f"{path.name}: not valid TOML: {e}") from None
    return parse_rule(data, path)


def _check_actions(data: dict[str, Any], path: Path) -> None:
    """Typed fix actions are validated when a rule file is (re)parsed, which is also when the parse cache is
    rebuilt: the validator needs packaging.requirements, too slow to import on every `check`."""
    from olmo_doctor.fix.actions import actions_error

    for i, fx in enumerate(data.get("fix", [])):
        if "action" in fx and (err := actions_error(fx["action"], fx.get("applicability"))):
            raise RuleError(f"{path.name}: fix[{i}].action: {err} (see known_issues/SCHEMA.md, Fix actions)")


def _parsed_tomls(paths: list[Path]) -> list[dict[str, Any]]:
    """The TOML of every rule file. tomllib is pure Python (~0.5 ms a file), so the parsed data is cached as
    JSON keyed by the files' names, sizes and mtimes; any edit to a rule file invalidates it."""
    stamp = hashlib.sha256(
        "\0".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in paths).encode()).hexdigest()[:16]
    cache = user_cache_dir() / "rules" / f"{stamp}.json"
    cached = read_cache(cache)
    if isinstance(cached, list) and len(cached) == len(paths):
        return cached
    data: list[dict[str, Any]] = []
    for path in paths:
        try:
            data.append(tomllib.loads(path.read_text()))
        except tomllib.TOMLDecodeError as e:
            raise RuleError(f"{path.name}: not valid TOML: {e}") from None
        _check_actions(data[-1], path)
    write_cache(cache, data)
    return data


@lru_cache(maxsize=4)
def load_rules(folder: Path | None = None) -> tuple[Rule, ...]:
    """Every rule in known_issues/, sorted by code; duplicate codes are an error."""
    folder = folder or data_dir("known_issues")
    paths = sorted(folder.glob("OD*.toml"))
    rules = [parse_rule(data, path) for data, path in zip(_parsed_tomls(paths), paths, strict=True)]
    seen: dict[str, Path] = {}
    for r in rules:
        if r.code in seen:
            raise RuleError(f"{r.path.name}: code {r.code} already used by {seen[r.code].name}")
        seen[r.code] = r.path
    for r in rules:
        unknown = [c for c in r.consequence_of if c not in seen]
        if unknown:
            raise RuleError(f"{r.path.name}: consequence_of names unknown rule(s) {', '.join(unknown)}")
    return tuple(rules)


def find_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    for r in load_rules():
        if key.upper() == r.code or key == r.name:
            return r
    return None
