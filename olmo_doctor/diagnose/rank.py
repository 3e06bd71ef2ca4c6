"""Turn signature hits (and optional machine facts) into findings ranked so the root cause comes first.

The evidence model, in order of precedence:

1. Tiers. A rule with a *cause* line beats one with only *symptom* lines (`error: command 'g++' failed` follows
   many causes), which beats one that only the machine facts support. Within a tier, the score decides.
2. Line ownership. A line that several rules' signatures match belongs to the most specific one (cause role,
   then weight): `NCCL WARN Call to posix_fallocate failed: No space left on device` is NCCL shared memory, not
   a full disk.
3. Score. Each distinct signature adds its weight once (symptoms a third of it); more matching lines add a
   little; the earliest cause line in the log adds a bonus, because the first error of a cascade is usually the
   root and the last one its echo.
4. Facts (from `--report` / `--here`). A rule whose `when` holds on the facts gains `when_boost` (1.5), one
   whose `when` is false loses `when_penalty` (0.5); `[diagnose] boost_when` adds `boost` (1.0) when true.

The `[diagnose]` table of a rule may set: `title`, `message` (used instead of the check-oriented ones; they can
use the signature's named groups, e.g. `{max_gcc}`), `boost_when`, `boost`, `when_boost`, `when_penalty`, and
`fires` / `quiet`: example log lines that must / must not match the rule's signatures (run by the tests).
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from olmo_doctor.diagnose.scan import Hit
from olmo_doctor.facts import FactValue
from olmo_doctor.findings import Finding, MatchedLine
from olmo_doctor.rules.engine import fires, to_finding
from olmo_doctor.rules.expr import Unknown, evaluate, fact_refs, truth
from olmo_doctor.rules.model import Rule, causes

SYMPTOM_FACTOR = 0.3
REPEAT_STEP, REPEAT_MAX = 0.1, 0.5
CASCADE_BONUS = 0.75
TIER_CAP = {0: 0.99, 1: 0.6, 2: 0.35, 3: 0.25}
MAX_QUOTED = 8
MAX_LINE_CHARS = 400


@dataclass
class Evidence:
    rule: Rule
    hits: list[Hit] = field(default_factory=list)
    score: float = 0.0
    fact: bool | None = None  # the rule's condition on the facts: holds, fails, or unknown
    tier: int = 3

    @property
    def first_cause(self) -> int:
        lines = [h.line for h in self.hits if h.ref.role != "symptom"]
        return min(lines) if lines else 1 << 62

    @property
    def first_line(self) -> int:
        return min((h.line for h in self.hits), default=1 << 62)


def _owned(hits: list[Hit]) -> list[Hit]:
    """Each line's evidence goes to its most specific signatures (cause before symptom, then weight)."""
    best: dict[int, tuple[bool, float]] = {}
    for h in hits:
        key = (h.ref.role != "symptom", h.ref.weight)
        if key > best.get(h.line, (False, -1.0)):
            best[h.line] = key
    return [h for h in hits if (h.ref.role != "symptom", h.ref.weight) == best[h.line]]


def condition(rule: Rule, facts: Mapping[str, FactValue]) -> bool | None:
    """True / False / None (unknown) for the rule's check on these facts."""
    if not facts or (rule.when is None and rule.check is None):
        return None
    if rule.when is not None and not any(r.startswith("gpu.*.") for r in fact_refs(rule.when)):
        return truth(rule.when, facts)
    try:
        return True if fires(rule, facts)[0] else None
    except Exception:  # a code check that cannot judge these facts says nothing
        return None


def _score(ev: Evidence, facts: Mapping[str, FactValue]) -> None:
    per_sig: dict[int, list[Hit]] = {}
    for h in ev.hits:
        per_sig.setdefault(h.ref.key, []).append(h)
    score = 0.0
    for sig_hits in per_sig.values():
        ref = sig_hits[0].ref
        factor = SYMPTOM_FACTOR if ref.role == "symptom" else 1.0
        lines = len({h.line for h in sig_hits})
        score += factor * (ref.weight + min(REPEAT_MAX, REPEAT_STEP * (lines - 1)))
    hints: dict[str, Any] = ev.rule.diagnose
    ev.fact = condition(ev.rule, facts)
    if ev.fact is True:
        score += float(hints.get("when_boost", 1.5))
    elif ev.fact is False:
        score -= float(hints.get("when_penalty", 0.5))
    if facts and isinstance(hints.get("boost_when"), str) and truth(hints["boost_when"], facts):
        score += float(hints.get("boost", 1.0))
    has_cause = any(h.ref.role != "symptom" for h in ev.hits)
    ev.tier = 0 if has_cause else (1 if ev.hits and ev.fact else 2 if ev.hits else 3)
    ev.score = score


def rank(hits: list[Hit], rules: tuple[Rule, ...], facts: Mapping[str, FactValue] | None = None) -> list[Evidence]:
    facts = facts or {}
    by_rule: dict[str, Evidence] = {}
    for h in _owned(hits):
        by_rule.setdefault(h.ref.rule.code, Evidence(h.ref.rule)).hits.append(h)
    if facts:  # rules the facts alone support (no log line) come last, as context
        for rule in rules:
            if rule.code not in by_rule and rule.severity != "info" and condition(rule, facts) is True:
                by_rule[rule.code] = Evidence(rule)
    evidence = list(by_rule.values())
    for ev in evidence:
        _score(ev, facts)
    causal = sorted((ev for ev in evidence if ev.tier == 0), key=lambda e: e.first_cause)
    for position, ev in enumerate(causal):
        ev.score += CASCADE_BONUS / (position + 1)
    return sorted(evidence, key=lambda e: (e.tier, -e.score, e.first_line, e.rule.code))


def confidence(evidence: list[Evidence]) -> list[float]:
    """A 0..1 confidence per finding, never increasing down the ranking."""
    out: list[float] = []
    for ev in evidence:
        value = min(TIER_CAP[ev.tier], 1 - math.exp(-max(ev.score, 0.05) / 2.5))
        out.append(round(min(value, out[-1]) if out else value, 2))
    return out


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def _placeholders(templates: list[str], facts: Mapping[str, FactValue], extra: dict[str, Any]) -> None:
    """Unknown facts render as <fact.key> (something to fill in), not as the word 'unknown'."""
    for template in templates:
        for name in _fields(template.replace("gpu.*.", "gpu_star.")):
            if name in extra:
                continue
            try:
                evaluate(name, facts)
            except Unknown:
                extra[name] = f"<{name.replace('gpu_star.', 'gpu.N.')}>"
            except Exception:  # a malformed field is the rule's problem; the engine renders it as it can
                continue


def to_diagnosis(ev: Evidence, facts: Mapping[str, FactValue], conf: float) -> Finding:
    """A Finding for the report: titles suited to a log, the quoted lines, and the confidence."""
    rule, hints = ev.rule, ev.rule.diagnose
    extra: dict[str, Any] = {}
    for h in sorted(ev.hits, key=lambda h: (h.ref.role == "symptom", h.line)):
        m = h.ref.pattern.search(h.text)
        if m:
            for k, v in m.groupdict().items():
                if v is not None:
                    extra.setdefault(k, v)
    title_t = str(hints["title"]) if ev.hits and hints.get("title") else rule.title
    message_t = str(hints["message"]) if ev.hits and hints.get("message") else rule.message
    templates = [title_t, message_t, *[f.title for f in rule.fixes], *[c for f in rule.fixes for c in f.commands]]
    _placeholders(templates, facts, extra)
    bound_rule = rule
    if title_t is not rule.title or message_t is not rule.message:
        from dataclasses import replace

        bound_rule = replace(rule, title=title_t, message=message_t)
    finding = to_finding(bound_rule, facts, extra)
    meaning = causes().get(rule.cause, "")
    if "<" in finding.title and not hints.get("title"):  # a check title about facts the log did not give
        finding.title = meaning[:1].upper() + meaning[1:] if meaning else finding.title
    if "<" in finding.message and not hints.get("message") and ev.hits:
        finding.message = (meaning[:1].upper() + meaning[1:] + ".") if meaning else finding.message
    seen: set[int] = set()
    for h in sorted(ev.hits, key=lambda h: h.line):
        if h.line in seen:
            continue
        seen.add(h.line)
        finding.matched_lines.append(MatchedLine(h.line, _shorten(h.text)))
    finding.matched_lines = finding.matched_lines[:MAX_QUOTED]
    finding.confidence = conf
    return finding


def _shorten(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"
