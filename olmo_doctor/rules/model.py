"""Rules as data: load and validate known_issues/*.toml (schema: known_issues/SCHEMA.md)."""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from olmo_common.bounded.files import read_text
from olmo_doctor.findings import SEVERITY_ORDER
from olmo_doctor.resources import data_dir, read_cache, user_cache_dir, write_cache
from olmo_doctor.rules.causes import Cause, RuleError, parse_causes
from olmo_doctor.rules.expr import ExprError, compile_expr

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Case", "FixSpec", "Rule", "RuleError", "Signature", "causes", "find_rule", "load_rules"]

# `build` rules are the refusals and warnings of a planned kernel build: their condition (olmo_doctor/checks/build.py)
# needs the recipe and the job sizing, so they are judged wherever a build is planned (build-kernels, check --scope
# install), never by the facts-only pass.
SCOPES = ("install", "train", "build")
APPLICABILITY = ("safe", "unsafe", "manual")
_CODE = re.compile(r"^(OD|BK)\d{3}$")
# `check = "module.function"`, a condition registered in olmo_doctor/checks/ (e.g. "memory.compile_jobs_exceed_memory")
_CHECK = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+$")


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
    cost it ~30 ms. tests/doctor/test_rules.py compiles every one, so a bad pattern still fails CI."""

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
    # build rules only: the build-kernels request the case plans (package, and optionally jobs, archs, subset)
    build: dict[str, Any] = field(default_factory=dict)


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
        """`all` is every scope `check` judges (install and train), never the build planner's own rules."""
        return scope in self.scopes or (scope == "all" and "build" not in self.scopes)

    @property
    def for_build(self) -> bool:
        return self.scopes == ("build",)

    def severity_for(self, scope: str) -> str:
        """`severity` where a build is planned (`--scope install`, build-kernels), else `unplanned_severity`."""
        return self.severity if scope == "install" or self.unplanned_severity is None else self.unplanned_severity


def cause_table() -> dict[str, Cause]:
    """known_issues/CAUSES.md's table, slug -> Cause (meaning and summary area); parsed with the rules' cache."""
    return _database(data_dir("known_issues"))[0]


def causes() -> dict[str, str]:
    """The cause vocabulary: slug -> meaning."""
    return {slug: c.meaning for slug, c in cause_table().items()}


def cause_areas() -> dict[str, str]:
    """Which summary line of `check` each cause belongs to: slug -> area."""
    return {slug: c.area for slug, c in cause_table().items()}


def _req(data: dict[str, Any], key: str, path: Path, kind: type = str) -> Any:
    if key not in data or not isinstance(data[key], kind):
        raise RuleError(f"{path.name}: '{key}' is required and must be a {kind.__name__}")
    return data[key]


def _check_build_condition(path: Path, scopes: list[str], when: object, check: object) -> None:
    from olmo_doctor.checks import resolve

    found = resolve(check)
    if scopes != ["build"] or when is not None or found is None or not found.needs_build:
        raise RuleError(f"{path.name}: a build rule has scope [\"build\"] only, no 'when', and a 'check' naming "
                        "a build condition registered in olmo_doctor/checks/ (e.g. \"build.no_gpu\")")


def _check_condition(path: Path, scopes: list[str], when: object, check: object, has_signature: bool) -> None:
    """A build rule names a build condition of olmo_doctor/checks/; any other rule gives exactly one of `when`
    or `check` (a fact condition there), unless it only recognises logs."""
    from olmo_doctor.checks import resolve

    if "build" in scopes:
        _check_build_condition(path, scopes, when, check)
        return
    if (when is None) == (check is None) and not has_signature:
        raise RuleError(f"{path.name}: give exactly one of 'when' (an expression) or 'check' (a function name)")
    if check is not None:
        found = resolve(check)
        if found is None or found.needs_build:
            raise RuleError(f"{path.name}: check {check!r} is not a registered check function "
                            "(olmo_doctor/checks/ holds them)")


def _code(data: dict[str, Any], path: Path) -> str:
    code = _req(data, "code", path)
    if not _CODE.match(code):
        raise RuleError(f"{path.name}: code '{code}' must look like OD123 (or BK123 for a build-kernels rule)")
    if not path.name.startswith(code):
        raise RuleError(f"{path.name}: file name must start with the rule code {code}")
    return str(code)


def _cause(data: dict[str, Any], path: Path, vocabulary: dict[str, Cause]) -> str:
    cause = _req(data, "cause", path)
    if cause not in vocabulary:
        raise RuleError(f"{path.name}: cause '{cause}' is not in known_issues/CAUSES.md")
    return str(cause)


def _severities(data: dict[str, Any], path: Path) -> tuple[str, str | None]:
    """`severity` (required) and `unplanned_severity` (optional), each one of SEVERITY_ORDER."""
    severity = _req(data, "severity", path)
    if severity not in SEVERITY_ORDER:
        raise RuleError(f"{path.name}: severity must be error, warning or info")
    unplanned = data.get("unplanned_severity")
    if unplanned is not None and unplanned not in SEVERITY_ORDER:
        raise RuleError(f"{path.name}: unplanned_severity must be error, warning or info")
    return severity, unplanned


def _roots(data: dict[str, Any], path: Path, code: str) -> tuple[str, ...]:
    roots = data.get("consequence_of", [])
    if not isinstance(roots, list) or any(not isinstance(c, str) or not _CODE.match(c) or c == code for c in roots):
        raise RuleError(f"{path.name}: consequence_of must be a list of other rule codes, e.g. [\"OD110\"]")
    return tuple(roots)


def _scopes(data: dict[str, Any], path: Path) -> list[str]:
    scopes = data.get("scope", ["install", "train"])  # a rule of `check` unless it says otherwise
    scopes = [scopes] if isinstance(scopes, str) else scopes
    if not scopes or any(s not in SCOPES for s in scopes):
        raise RuleError(f"{path.name}: scope must be a subset of {SCOPES}")
    return list(scopes)


def _condition(data: dict[str, Any], path: Path, scopes: list[str]) -> tuple[str | None, str | None]:
    """`when` (compiled here, so a bad expression fails at load) and `check`."""
    when, check = data.get("when"), data.get("check")
    _check_condition(path, scopes, when, check, bool(data.get("signature")))
    if when is not None:
        try:
            compile_expr(when)
        except ExprError as e:
            raise RuleError(f"{path.name}: when: {e}") from None
    return when, check


def _fix(fx: dict[str, Any], i: int, path: Path) -> FixSpec:
    app = fx.get("applicability")
    if app not in APPLICABILITY:
        raise RuleError(f"{path.name}: fix[{i}].applicability must be one of {APPLICABILITY}")
    if app != "manual" and "action" not in fx:
        raise RuleError(f"{path.name}: fix[{i}] is {app} but has no typed 'action' for fix --apply")
    return FixSpec(_req(fx, "title", path), app, tuple(fx.get("commands", [])), fx.get("action"))


def _signature(sg: dict[str, Any], path: Path) -> Signature:
    flags = re.I if sg.get("ignore_case", True) else 0
    return Signature(_req(sg, "pattern", path), flags, float(sg.get("weight", 1.0)), sg.get("role", "cause"))


def _cases(tc: dict[str, Any], i: int, path: Path, scopes: list[str]) -> list[Case]:
    """The cases of one [[test]] table: a `fires` one, a `quiet` one, or both."""
    build = tc.get("build", {})
    if ("build" in scopes) != isinstance(build.get("package") if isinstance(build, dict) else None, str):
        raise RuleError(f"{path.name}: test[{i}]: a build rule's case names the request it plans, e.g. "
                        "build = { package = \"flash-attn\" }; the cases of other rules have no 'build'")
    cases = [Case(dict(tc[key]), fires, tc.get("scope"), dict(build))
             for key, fires in (("fires", True), ("quiet", False)) if key in tc]
    if not cases:
        raise RuleError(f"{path.name}: test[{i}] needs 'fires' or 'quiet'")
    return cases


def _sources(data: dict[str, Any], path: Path) -> tuple[str, ...]:
    sources = data.get("sources", [])
    if not sources:
        raise RuleError(f"{path.name}: every rule needs at least one source")
    return tuple(sources)


def parse_rule(data: dict[str, Any], path: Path, vocabulary: dict[str, Cause] | None = None) -> Rule:
    """One rule file's TOML, checked section by section in a fixed order: the first problem found is reported."""
    vocabulary = cause_table() if vocabulary is None else vocabulary
    code = _code(data, path)
    cause = _cause(data, path, vocabulary)
    severity, unplanned = _severities(data, path)
    roots = _roots(data, path, code)
    scopes = _scopes(data, path)
    when, check = _condition(data, path, scopes)
    doc = data.get("doc", {})
    fixes = tuple(_fix(fx, i, path) for i, fx in enumerate(data.get("fix", [])))
    sigs = tuple(_signature(sg, path) for sg in data.get("signature", []))
    cases = tuple(c for i, tc in enumerate(data.get("test", [])) for c in _cases(tc, i, path, scopes))
    sources = _sources(data, path)
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
        fixes=fixes,
        signatures=sigs,
        sources=sources,
        cases=cases,
        path=path,
        diagnose=dict(data.get("diagnose", {})),
        unplanned_severity=unplanned,
        consequence_of=roots,
    )


def load_file(path: Path) -> Rule:
    try:
        data = tomllib.loads(read_text(path, "rules"))
    except tomllib.TOMLDecodeError as e:
        raise RuleError(f"{path.name}: not valid TOML: {e}") from None
    return parse_rule(data, path)


def _check_actions(data: dict[str, Any], path: Path) -> None:
    """Typed fix actions are validated when a rule file is (re)parsed, which is also when the parse cache is
    rebuilt: the validator needs packaging.requirements, too slow to import on every `check`."""
    from olmo_doctor.rules.actions import actions_error

    for i, fx in enumerate(data.get("fix", [])):
        if "action" in fx and (err := actions_error(fx["action"], fx.get("applicability"))):
            raise RuleError(f"{path.name}: fix[{i}].action: {err} (see known_issues/SCHEMA.md, Fix actions)")


@lru_cache(maxsize=4)
def _database(folder: Path) -> tuple[dict[str, Cause], list[tuple[Path, dict[str, Any]]]]:
    """The cause table and the TOML of every rule file in `folder`. tomllib is pure Python (~0.5 ms a file),
    so both are cached as JSON keyed by the files' names, sizes and mtimes; any edit invalidates the cache.
    The causes always come from the project's known_issues/CAUSES.md (a test folder of rules shares them)."""
    causes_md = data_dir("known_issues") / "CAUSES.md"
    paths = sorted(folder.glob("*.toml"))
    stamp = hashlib.sha256("\0".join(
        f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in [causes_md, *paths]).encode()).hexdigest()[:16]
    cache = user_cache_dir() / "rules" / f"{stamp}.json"
    cached = read_cache(cache)
    if isinstance(cached, dict) and len(cached.get("rules", [])) == len(paths):
        table = {slug: Cause(slug, area, meaning) for slug, area, meaning in cached["causes"]}
        return table, list(zip(paths, cached["rules"], strict=True))
    table = parse_causes(read_text(causes_md, "rules"), "known_issues/CAUSES.md")
    data: list[dict[str, Any]] = []
    for path in paths:
        try:
            data.append(tomllib.loads(read_text(path, "rules")))
        except tomllib.TOMLDecodeError as e:
            raise RuleError(f"{path.name}: not valid TOML: {e}") from None
        _check_actions(data[-1], path)
    write_cache(cache, {"causes": [[c.slug, c.area, c.meaning] for c in table.values()], "rules": data})
    return table, list(zip(paths, data, strict=True))


@lru_cache(maxsize=4)
def load_rules(folder: Path | None = None) -> tuple[Rule, ...]:
    """Every rule in known_issues/ (OD checks and diagnoses, BK build refusals), sorted by file name; duplicate
    codes are an error."""
    table, files = _database(folder or data_dir("known_issues"))
    if folder is not None:  # a test folder of rules shares the project's causes
        table = cause_table()
    rules = [parse_rule(data, path, table) for path, data in files]
    _check_codes(rules)
    return tuple(rules)


def _check_codes(rules: list[Rule]) -> None:
    """Each code is used once, and every consequence_of names a code that exists."""
    seen: dict[str, Path] = {}
    for r in rules:
        if r.code in seen:
            raise RuleError(f"{r.path.name}: code {r.code} already used by {seen[r.code].name}")
        seen[r.code] = r.path
    for r in rules:
        unknown = [c for c in r.consequence_of if c not in seen]
        if unknown:
            raise RuleError(f"{r.path.name}: consequence_of names unknown rule(s) {', '.join(unknown)}")


def find_rule(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    for r in load_rules():
        if key.upper() == r.code or key == r.name:
            return r
    return None
