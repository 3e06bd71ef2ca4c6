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
5. Refining rules. A rule with `[diagnose] refines = true` only sharpens a cause another rule's cause line
   shows: its lines (a flash_attn frame in a traceback) alone are no evidence and are dropped; next to such a
   line they speak for the cause (the fault ran through a custom kernel) and add their weight.
6. Explained lines. A rule the facts point at (its `when` or its `boost_when` holds) and whose `[diagnose]
   explains` names a cause the log shows takes that evidence over, ranked just above it: an NCCL "unhandled
   system error" is unspecific, but on WSL2 it is the WSL2 limitation (OD221 explains `nccl_failure`).

7. Context. A signature with `role = "context"` (a compile running) is never evidence; one with
   `role = "in_context"` (the OOM killer's kill) counts as a cause line only in a log where a context signature of
   the same rule matched too: the OOM killer during a build is the build's memory, whatever process it killed.

The `[diagnose]` table of a rule may set: `title`, `message` (used instead of the check-oriented ones; they can
use the signature's named groups, e.g. `{max_gcc}`), `boost_when`, `boost`, `when_boost`, `when_penalty`,
`explains` (a list of cause slugs), `refines` (see 5.), `lookup` (template values looked up by a named group's
value: `[diagnose.lookup.needs]` with `from`, `values`, `default`), and
`fires` / `quiet`: example log lines that must / must not match the rule's signatures (run by the tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from olmo_doctor.diagnose.scan import Hit
from olmo_doctor.facts import FactValue
from olmo_doctor.rules.engine import fires
from olmo_doctor.rules.expr import fact_refs, truth
from olmo_doctor.rules.model import Rule

SYMPTOM_FACTOR = 0.3
REPEAT_STEP, REPEAT_MAX = 0.1, 0.5
CASCADE_BONUS = 0.75
TIER_CAP = {0: 0.99, 1: 0.6, 2: 0.35, 3: 0.25}


@dataclass
class Evidence:
    """Everything pointing at one cause: log lines (from any of its rules) and what the facts say."""

    rule: Rule  # the rule that speaks for the cause in the report
    rules: list[Rule] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    score: float = 0.0
    fact: bool | None = None  # does some rule of this cause hold on the facts (True), none (False), unknown (None)
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


def _log_score(hits: list[Hit]) -> float:
    """Each line counts once (through its strongest signature); each signature adds its weight once, plus a
    little for every further line it matched."""
    per_line: dict[int, Hit] = {}
    for h in hits:
        if h.line not in per_line or h.ref.weight > per_line[h.line].ref.weight:
            per_line[h.line] = h
    per_sig: dict[int, list[Hit]] = {}
    for h in per_line.values():
        per_sig.setdefault(h.ref.key, []).append(h)
    score = 0.0
    for sig_hits in per_sig.values():
        ref = sig_hits[0].ref
        factor = SYMPTOM_FACTOR if ref.role == "symptom" else 1.0
        score += factor * (ref.weight + min(REPEAT_MAX, REPEAT_STEP * (len(sig_hits) - 1)))
    return score


def _with_facts(score: float, ev: Evidence, states: dict[str, bool | None], facts: Mapping[str, FactValue]) -> float:
    """The log's score plus what the facts add: the strongest boost of a rule they confirm, else a penalty when
    they rule the cause out; plus the strongest `boost_when` that holds."""
    boosts = [float(r.diagnose.get("when_boost", 1.5)) for r in ev.rules if states[r.code] is True]
    if boosts:
        score += max(boosts)
    elif ev.fact is False:
        score -= max(float(r.diagnose.get("when_penalty", 0.5)) for r in ev.rules)
    return score + (_boost_when(ev, facts) if facts else 0.0)


def _boost_when(ev: Evidence, facts: Mapping[str, FactValue]) -> float:
    """The strongest `boost` of a rule whose `boost_when` holds on these facts (0 when none does)."""
    extra = [float(r.diagnose.get("boost", 1.0)) for r in ev.rules
             if isinstance(r.diagnose.get("boost_when"), str) and truth(r.diagnose["boost_when"], facts)]
    return max(extra, default=0.0)


def _tier(ev: Evidence) -> int:
    """0: a cause line in the log; 1: symptom lines the facts confirm; 2: symptom lines alone; 3: facts alone."""
    if any(h.ref.role != "symptom" for h in ev.hits):
        return 0
    if not ev.hits:
        return 3
    return 1 if ev.fact else 2


def _speaker(ev: Evidence, states: dict[str, bool | None]) -> Rule:
    """The rule that speaks for the cause: one whose own log lines show the cause, else one the facts confirm,
    else the best guess."""
    own = {r.code: _log_score([h for h in ev.hits if h.ref.rule.code == r.code]) for r in ev.rules}
    causal = {h.ref.rule.code for h in ev.hits if h.ref.role != "symptom"}
    refining = {h.ref.rule.code for h in ev.hits if _refines(h.ref.rule)}
    first = ev.rule.code
    return max(ev.rules, key=lambda r: (r.code in refining, r.code in causal, states[r.code] is True, own[r.code],
                                        r.code == first))


def _judge(ev: Evidence, facts: Mapping[str, FactValue]) -> None:
    """Score one cause and pick the rule that speaks for it."""
    states = {rule.code: condition(rule, facts) for rule in ev.rules}
    known = [v for v in states.values() if v is not None]
    ev.fact = True if True in known else (False if known else None)
    ev.score = _with_facts(_log_score(ev.hits), ev, states, facts)
    ev.tier = _tier(ev)
    ev.rule = _speaker(ev, states)


def _refines(rule: Rule) -> bool:
    return rule.diagnose.get("refines") is True


def _drop_lone_refinements(by_cause: dict[str, Evidence]) -> None:
    """Lines of refining rules count only beside a cause line of another rule of the same cause (see 5.)."""
    for cause, ev in list(by_cause.items()):
        if _has_cause_line(ev):
            continue
        ev.hits = [h for h in ev.hits if not _refines(h.ref.rule)]
        if not ev.hits:
            del by_cause[cause]
            continue
        ev.rules = [r for r in ev.rules if not _refines(r)]
        ev.rule = ev.hits[0].ref.rule


def _has_cause_line(ev: Evidence) -> bool:
    """A line of a rule that does not refine another, and is more than a symptom."""
    return any(h.ref.role != "symptom" and not _refines(h.ref.rule) for h in ev.hits)


def _explains(rule: Rule) -> set[str]:
    value = rule.diagnose.get("explains", [])
    return {str(v) for v in value} if isinstance(value, list) else set()


def _boosted(rule: Rule, facts: Mapping[str, FactValue]) -> bool:
    when = rule.diagnose.get("boost_when")
    return isinstance(when, str) and truth(when, facts) is True


def _points_at(ev: Evidence, facts: Mapping[str, FactValue]) -> bool:
    """A cause without a cause line that the facts confirm or boost. Its own symptom lines (the WSL2 kernel name
    in a pasted report) do not stop it: only a cause line would."""
    if ev.tier == 0 or ev.fact is False:
        return False
    return bool(ev.fact) or any(_boosted(r, facts) for r in ev.rules)


def _take_over(evidence: list[Evidence], facts: Mapping[str, FactValue]) -> None:
    """A cause the facts point at takes over the log lines of a cause it explains (see 6. above)."""
    for ev in (e for e in evidence if _points_at(e, facts)):
        explained = [other for other in evidence if other.hits and other.rule.cause in _explains(ev.rule)]
        if explained:
            _take(ev, min(explained, key=lambda e: (e.tier, -e.score)))


def _take(ev: Evidence, best: Evidence) -> None:
    """ev takes over best's log lines and tier, and ranks above it."""
    ev.hits = list(best.hits) + [h for h in ev.hits if h not in best.hits]
    ev.tier = best.tier
    ev.score = best.score + max(ev.score, 0.5)


def in_context(hits: list[Hit]) -> list[Hit]:
    """Context lines (role "context": a compile running) are no evidence; a line that counts only in such a context
    (role "in_context": the OOM killer's kill) is kept where its rule's context is in the log, else dropped."""
    placed = {h.ref.rule.code for h in hits if h.ref.role == "context"}
    return [h for h in hits if h.ref.role != "context" and (h.ref.role != "in_context" or h.ref.rule.code in placed)]


def _by_cause(hits: list[Hit]) -> dict[str, Evidence]:
    """The log's evidence per cause, each line with its most specific signatures."""
    by_cause: dict[str, Evidence] = {}
    for h in _owned(in_context(hits)):
        ev = by_cause.setdefault(h.ref.rule.cause, Evidence(h.ref.rule))
        ev.hits.append(h)
        if h.ref.rule not in ev.rules:
            ev.rules.append(h.ref.rule)
    _drop_lone_refinements(by_cause)
    return by_cause


def _add_fact_rules(by_cause: dict[str, Evidence], rules: tuple[Rule, ...], facts: Mapping[str, FactValue]) -> None:
    """Rules with a condition join the cause the log shows (their condition may confirm it); a cause the log does
    not show joins when the facts alone show it (context)."""
    shown = set(by_cause)
    for rule in rules:
        ev = by_cause.get(rule.cause)
        if ev is not None:
            if rule not in ev.rules and (rule.when is not None or rule.check is not None):
                ev.rules.append(rule)
        elif facts and rule.severity != "info" and _facts_show(rule, facts, shown):
            by_cause[rule.cause] = Evidence(rule, [rule])


def _facts_show(rule: Rule, facts: Mapping[str, FactValue], shown: set[str]) -> bool:
    """The rule holds on the facts, or (unknown) it explains a cause the log shows and its boost holds."""
    state = condition(rule, facts)
    return state is True or (state is None and bool(_explains(rule) & shown) and _boosted(rule, facts))


def rank(hits: list[Hit], rules: tuple[Rule, ...], facts: Mapping[str, FactValue] | None = None) -> list[Evidence]:
    """Evidence per cause, root cause first."""
    facts = facts or {}
    by_cause = _by_cause(hits)
    _add_fact_rules(by_cause, rules, facts)
    evidence = list(by_cause.values())
    for ev in evidence:
        _judge(ev, facts)
    _take_over(evidence, facts)
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
