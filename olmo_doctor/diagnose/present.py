"""Turn a cause's evidence into a Finding: wording suited to a log, quoted lines, confidence, honest fixes.

A rule's check-oriented title ("NVIDIA driver {driver.version} is too old ...") needs facts a bare log does not
give, so a log finding prefers the rule's `[diagnose] title` / `message`, which may use the signature's named
groups (`(?P<max_gcc>\\d+)` -> `{max_gcc}`). Facts that stay unknown render as `<fact.key>` to fill in, and a fix
whose typed action would carry such a placeholder is shown as manual: `fix --apply` never runs a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from olmo_doctor.diagnose.rank import Evidence
from olmo_doctor.facts import FactValue
from olmo_doctor.findings import Finding, MatchedLine
from olmo_doctor.rules.engine import fires, placeholders, to_finding
from olmo_doctor.rules.model import Rule, causes

MAX_QUOTED = 8
MAX_LINE_CHARS = 400


def _action_strings(action: Any) -> list[str]:
    if isinstance(action, str):
        return [action]
    if isinstance(action, dict):
        return [s for v in action.values() for s in _action_strings(v)]
    if isinstance(action, list):
        return [s for v in action for s in _action_strings(v)]
    return []


def _lookups(hints: Mapping[str, Any], extra: dict[str, Any]) -> None:
    """`[diagnose.lookup.NAME]`: a template value looked up by a named group's value ("fbgemm.dll" -> what that DLL
    needs), so a finding names what the log's own words imply; `default` when the group did not match."""
    tables = hints.get("lookup")
    if not isinstance(tables, Mapping):
        return
    for name, spec in tables.items():
        if name in extra or not isinstance(spec, Mapping):
            continue
        values = spec.get("values")
        values = values if isinstance(values, Mapping) else {}
        key = str(extra.get(str(spec.get("from")), "")).lower()
        extra[name] = str(values.get(key, spec.get("default", "")))


def _context(rule: Rule, facts: Mapping[str, FactValue]) -> tuple[dict[str, Any], Mapping[str, FactValue]]:
    """Template values a firing rule computes (code checks, the GPU a gpu.* rule fired on)."""
    if not facts:
        return {}, facts
    try:
        fired, extra, bound = fires(rule, facts)
    except Exception:
        return {}, facts
    return (dict(extra), bound) if fired else ({}, facts)


def _groups(ev: Evidence, extra: dict[str, Any]) -> None:
    """The signatures' named groups as template values, cause lines first (a value already set wins)."""
    for h in sorted(ev.hits, key=lambda h: (h.ref.role == "symptom", h.line)):
        m = h.ref.pattern.search(h.text)
        for k, v in (m.groupdict() if m else {}).items():
            if v is not None:
                extra.setdefault(k, v)


def _templates(rule: Rule, title: str, message: str) -> list[str]:
    return [title, message, *[f.title for f in rule.fixes], *[c for f in rule.fixes for c in f.commands],
            *[s for f in rule.fixes for s in _action_strings(f.action)]]


def _plain_wording(finding: Finding, ev: Evidence) -> None:
    """A check title or message about facts the log lacks (still holding a <fact.key>) becomes the cause's
    meaning, unless the rule words its log finding itself."""
    hints = ev.rule.diagnose
    meaning = causes().get(ev.rule.cause, "")
    sentence = meaning[:1].upper() + meaning[1:]
    if not sentence:
        return
    if "<" in finding.title and not hints.get("title"):
        finding.title = sentence
    if "<" in finding.message and not hints.get("message") and ev.hits:
        finding.message = sentence + "."


def _quoted(ev: Evidence) -> list[MatchedLine]:
    """The log lines behind the finding, each once, in log order, at most MAX_QUOTED."""
    seen: set[int] = set()
    quoted = []
    for h in sorted(ev.hits, key=lambda h: h.line):
        if h.line not in seen:
            seen.add(h.line)
            quoted.append(MatchedLine(h.line, _shorten(h.text, h.ref.pattern)))
    return quoted


def to_diagnosis(ev: Evidence, facts: Mapping[str, FactValue], conf: float) -> Finding:
    rule, hints = ev.rule, ev.rule.diagnose
    extra, bound = _context(rule, facts)
    _groups(ev, extra)
    _lookups(hints, extra)
    title_t = str(hints["title"]) if ev.hits and hints.get("title") else rule.title
    message_t = str(hints["message"]) if ev.hits and hints.get("message") else rule.message
    placeholders(_templates(rule, title_t, message_t), bound, extra, rule.diagnose.get("placeholders", {}))
    finding = to_finding(replace(rule, title=title_t, message=message_t), bound, extra)
    _plain_wording(finding, ev)
    for fix in finding.fixes:
        if fix.action is not None and any("<" in s for s in _action_strings(fix.action)):
            fix.action, fix.applicability = None, "manual"  # never apply a value we had to leave blank
    finding.matched_lines = (finding.matched_lines + _quoted(ev))[:MAX_QUOTED]
    finding.confidence = conf
    return finding


def _shorten(text: str, pattern: re.Pattern[str] | None = None) -> str:
    """At most MAX_LINE_CHARS of a quoted line: its start, or the part around what the signature matched."""
    text = text.strip()
    if len(text) <= MAX_LINE_CHARS:
        return text
    m = pattern.search(text) if pattern is not None else None
    if m is None or m.end() < MAX_LINE_CHARS - 1:
        return text[: MAX_LINE_CHARS - 1] + "…"
    start = max(0, min(m.start() - 80, len(text) - MAX_LINE_CHARS + 2))
    piece = text[start : start + MAX_LINE_CHARS - 2]
    return "…" + piece + ("…" if start + MAX_LINE_CHARS - 2 < len(text) else "")
