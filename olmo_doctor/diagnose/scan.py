"""Find every line of a log that a rule signature matches, fast enough for a 50 MB build log.

Running ~170 signatures over every line would take minutes, so the scan works in two steps on the raw UTF-8
bytes (no decoding of the 99.9 % of lines that matter to no one):

1. Prefilter. Each signature requires some literal text (`literals.candidates`); `grams` picks, on a sample of
   this log, one requirement per signature and one short gram per required string, and one regex finds the
   few lines holding any gram.
2. Confirm. On such a line the full required string must be there, then the signature's own regex runs on the
   decoded line (split at carriage returns, tool prefixes removed). A required string split over two lines
   (issue trackers wrap long lines) is tried on the line joined with its neighbour.

Hostile logs (tests/doctor/test_diagnose_bounds.py) stay linear: repeated lines reuse their needles and their misses
(bounded memories), two-line attempts have a budget per signature, and a required string with a flood of
candidate lines in one chunk hands its plain signatures to one search over the whole next chunks (`_bulk`).
Distinct near misses of many signatures at once are bounded by the work budget (`budget.py`): every regex pass
and Python step is paid from an allowance earned per byte scanned, and checks it cannot pay are counted.
Signatures without any usable literal run on every line; tests keep the shipped rules off that slow path.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from olmo_doctor.diagnose import grams as G
from olmo_doctor.diagnose.budget import LINE_COST, PASSED_KEEP, RESERVE, STEP_COST, Budget
from olmo_doctor.diagnose.literals import Alt, candidates, plain
from olmo_doctor.diagnose.seams import join_lines, match_line, separator
from olmo_doctor.rules.model import Rule

# A message continued on the next line leaves at most TAIL characters after its required string; a wrapped one
# has its required string within SEAM characters of the line break.
TAIL = 40
SEAM = 200
# Enough lines of one signature to judge it (the ranking stops counting repeats at 5); later ones are skipped so
# a benign line repeated 100,000 times cannot slow the scan down.
MAX_HITS_PER_SIGNATURE = 20
# Two-line attempts per signature: real logs need a few dozen at most (the bench log and the fixtures stay under
# 20), so a wrapped message is found among the first thousand; beyond that a hostile log would only cost time.
MAX_PAIR_TRIES = 1_000
MAX_PAIR_LOOKS = 2_000  # and candidates for one, cheap as they are
# Candidate lines of one required string in one chunk above which its signatures (when plain) search whole chunks
# instead: one regex pass beats a Python step per line when a log is a flood of near misses of one message.
BULK_LINES = 40_000
# Remembered misses (a few MB at most); the set starts over when full.
MAX_MISSES = 200_000


@dataclass(frozen=True)
class SigRef:
    """One signature of one rule, with the literal requirements the prefilter can use."""

    key: int
    rule: Rule
    index: int
    pattern: re.Pattern[str]
    weight: float
    role: str
    options: tuple[Alt, ...]
    plain: bool = False  # no anchors or lookbehinds (literals.plain): a search of the raw line decides a miss


@dataclass(frozen=True)
class Hit:
    ref: SigRef
    line: int  # 1-based line number of the (first) matched line
    text: str  # the matched line as shown to the user
    end_line: int  # the last line, when a wrapped message spans two


@dataclass
class Index:
    """All signatures of a rule set."""

    refs: list[SigRef]
    slow: list[SigRef] = field(default_factory=list)

    @classmethod
    def build(cls, rules: Iterable[Rule]) -> Index:
        refs: list[SigRef] = []
        for rule in rules:
            for i, sig in enumerate(rule.signatures):
                opts = tuple(candidates(sig.pattern))
                refs.append(SigRef(len(refs), rule, i, sig.pattern, sig.weight, sig.role, opts, plain(sig.pattern)))
        return cls(refs, [r for r in refs if not r.options])


class Scanner:
    """Scans byte chunks of one log in order; line numbers continue across chunks."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.needles: dict[int, Alt] = {}
        self.by_needle: dict[str, list[SigRef]] = {}
        self.grams: dict[bytes, list[str]] = {}
        self.closure: dict[bytes, list[str]] = {}
        self.regex: re.Pattern[bytes] | None = None
        self.slow = [(ref, re.compile(ref.pattern.pattern, ref.pattern.flags | re.M)) for ref in index.slow]
        self.line = 1  # number of the first line of the next chunk
        self.carry = b""  # the last line of the previous chunk, for messages wrapped across the boundary
        self.seen: set[tuple[int, int]] = set()
        self.line_needles: dict[int, set[str]] = {}  # needles by line hash (lowercased): repeated lines
        self.misses: set[tuple[int, ...]] = set()  # (signature, line hash) and (signature, pair hashes) that failed
        self.counts: Counter[int] = Counter()  # hits per signature
        self.pair_tries: Counter[int] = Counter()  # two-line attempts per signature that got past the seam test
        self.pair_looks: Counter[int] = Counter()  # two-line candidates per signature (before the seam test)
        self.needle_lines: Counter[str] = Counter()  # candidate lines per required string in the last chunk
        self.bulk: set[str] = set()  # required strings whose signatures search whole chunks (see BULK_LINES)
        self.budget = Budget()
        self.fed = 0  # bytes of log in the chunks before the current one
        self.upto = 0  # the byte offset (in the whole log) of the end of the line being checked
        self.passed: deque[tuple[int, bytes]] = deque()  # (first line, text) of the last lines not checked in full
        self.passed_size = 0

    def _prepare(self, chunk: bytes) -> None:
        data = G.sample(chunk)
        self.needles = G.pick_requirements({r.key: list(r.options) for r in self.index.refs if r.options}, data)
        for ref in self.index.refs:
            for needle in self.needles.get(ref.key, ()):
                self.by_needle.setdefault(needle, []).append(ref)
        self.grams = G.choose_grams(self.by_needle, data)
        self.freq = Counter(data)
        self._compile()

    def _compile(self) -> None:
        firsts = {g[0] for g in self.grams}
        self.regex = G.gram_regex(tuple(sorted(self.grams)), tuple(sorted((b, self.freq[b]) for b in firsts)))
        # The regex tries a first character's grams longest first, so at a position it reports the longest gram
        # there; every other gram there is a prefix of it, so the needles of a match are those of its prefixes.
        self.closure = {g: sorted({n for p in self.grams if g.startswith(p) for n in self.grams[p]})
                        for g in self.grams}

    def _retire(self) -> bool:
        """Forget needles whose signatures all have enough hits; True when the gram set changed."""
        full = {k for k, n in self.counts.items() if n >= MAX_HITS_PER_SIGNATURE}
        done = {n for n, refs in self.by_needle.items() if all(r.key in full for r in refs)} | self.bulk
        changed = False
        for gram in list(self.grams):
            changed |= self._drop_needles(gram, done)
        return changed

    def _drop_needles(self, gram: bytes, done: set[str]) -> bool:
        """Drop the `done` needles of a gram (the gram itself when none is left); True when any was dropped."""
        kept = [n for n in self.grams[gram] if n not in done]
        if len(kept) == len(self.grams[gram]):
            return False
        if kept:
            self.grams[gram] = kept
        else:
            del self.grams[gram]
        return True

    def feed(self, chunk: bytes) -> list[Hit]:
        """Hits in this chunk (it ends at a line boundary, except possibly the log's last line)."""
        if self.regex is None:
            self._prepare(chunk)
        else:
            self._adapt()
        text, line0 = (self.carry + chunk, self.line - 1) if self.carry else (chunk, self.line)
        hits = list(self._scan(text, line0, self.fed - len(text) + len(chunk)))
        self.fed += len(chunk)
        self.line += chunk.count(b"\n")
        if chunk.endswith(b"\n"):
            self.carry = chunk[chunk.rfind(b"\n", 0, len(chunk) - 1) + 1 :]
        else:  # an unterminated tail is still one line of its own
            self.carry = b""
            self.line += 1
        return hits

    def _adapt(self) -> None:
        """Between chunks: needles on many lines go to bulk search; needles with enough hits are retired."""
        self.bulk |= {n for n, count in self.needle_lines.items()
                      if count >= BULK_LINES and all(r.plain for r in self.by_needle[n])}
        self.needle_lines.clear()
        if self._retire():
            self._compile()

    def _check_line(self, text: bytes, start: int, line: int, needles: set[str], whole: int, base: int
                    ) -> Iterator[Hit]:
        """The hits of one candidate line; kept for the end when the budget did not pay for all its checks."""
        failures = self.budget.failures
        if not whole:
            self.budget.skip(line)
        end = text.find(b"\n", start)
        end = len(text) if end < 0 else end
        self.upto = base + end
        yield from self._confirm(text, start, line, needles)
        if self.budget.failures != failures:
            self._keep_passed(text, start, end, line)

    def _keep_passed(self, text: bytes, start: int, end: int, line: int) -> None:
        """Remember text[start:end] (whole lines from line `line`), lines the budget did not check in full: the
        last PASSED_KEEP bytes of such lines are kept."""
        cut = start
        if end - start > PASSED_KEEP:
            nl = text.find(b"\n", end - PASSED_KEEP, end)
            cut = nl + 1 if nl >= 0 else end
        piece = text[cut:end] + b"\n"
        self.passed.append((line + text.count(b"\n", start, cut), piece))
        self.passed_size += len(piece)
        while self.passed_size > PASSED_KEEP and len(self.passed) > 1:
            self.passed_size -= len(self.passed.popleft()[1])

    def finish(self) -> list[Hit]:
        """Hits among the last lines the budget did not check in full, checked now from a reserve: a flood of near
        misses right before the log's last lines must not hide the error they end with."""
        hits: list[Hit] = []
        self.budget.start += RESERVE
        self.budget.last = 1 << 62  # lines checked again are not counted twice
        failures, rechecked = self.budget.failures, 0
        pending = list(self.passed)
        self.passed.clear()
        for line, text in reversed(pending):  # the last lines first: the reserve may not cover all of them
            self.carry = b""
            hits += self._scan(text, line, self.fed - len(text))  # earning nothing more than the whole log did
            rechecked += text.count(b"\n")
        if rechecked and self.budget.failures == failures:  # all of them checked after all
            self.budget.unskip(rechecked)
        self.passed_size = 0
        return hits

    def jump(self, line: int) -> None:
        """The next chunk starts at `line`: lines before it were skipped, so no message spans the gap."""
        self.line, self.carry = line, b""

    def _candidates(self, low: bytes, base: int) -> Iterator[tuple[int, set[str] | None, int]]:
        """Line by line, so that the checks of a line are paid before the next line is looked at (`base` is the
        offset of `low` in the log): (line start offset, the needles whose gram occurs on that line, 1 when all
        of the line was looked at, else 0: the work budget ran out on it); or, when the budget cannot pay for a
        line, (its start offset, None, the offset where the budget can pay again): the lines between are passed
        over."""
        assert self.regex is not None
        search, budget = self.regex.search, self.budget
        pos = 0
        while (m := search(low, pos)) is not None:
            p = m.start()
            line_end = low.find(b"\n", p)
            line_end = len(low) if line_end < 0 else line_end
            line_start = low.rfind(b"\n", 0, p) + 1
            if not budget.spend(LINE_COST, base + line_end):
                resume = budget.earned_at(LINE_COST) - base
                pos = max(line_end + 1, low.rfind(b"\n", 0, resume) + 1 if resume < len(low) else len(low))
                yield line_start, None, pos
                continue
            needles, whole = self._line_needles(low, m, line_start, line_end, base + line_end)
            yield line_start, needles, int(whole)
            pos = line_end + 1

    def _line_needles(self, low: bytes, first: re.Match[bytes], start: int, end: int, upto: int
                      ) -> tuple[set[str], bool]:
        """The needles whose gram occurs on the line low[start:end] (`first`: its first gram), and whether the
        budget paid for all of the line; a line seen before (a repeat) costs nothing."""
        assert self.regex is not None
        key = hash(low[start:end])
        known = self.line_needles.get(key)
        if known is not None:
            return known, True
        needles = set(self.closure[first.group()])
        q, whole = first.start() + 1, True
        while (more := self.regex.search(low, q, end)) is not None:  # the rest of the line
            if not self.budget.spend(STEP_COST, upto):
                whole = False
                break
            needles.update(self.closure[more.group()])
            q = more.start() + 1
        if len(self.line_needles) >= MAX_MISSES:
            self.line_needles.clear()
        if whole:
            self.line_needles[key] = needles
        return needles, whole

    def _scan(self, text: bytes, line0: int, base: int) -> Iterator[Hit]:
        counted, line = 0, line0
        for start, needles, whole in self._candidates(text.lower(), base):  # in order: the scan runs forward
            line += text.count(b"\n", counted, start)
            counted = start
            if needles is None:  # passed over up to offset `whole`; the last such lines are checked at the end
                self.budget.skip(line, max(1, text.count(b"\n", start, whole)))
                self._keep_passed(text, start, whole, line)
            else:
                yield from self._check_line(text, start, line, needles, whole, base)
        self.upto = base + len(text)
        if self.bulk:
            yield from self._bulk(text, line0)
        if self.slow:
            yield from self._slow(text, line0)

    def _slow(self, text: bytes, line0: int) -> Iterator[Hit]:
        """Signatures without a literal: every line (never the case for the shipped rules)."""
        decoded = text.decode("utf-8", "replace")
        for ref, multi in self.slow:
            if not self._afford(len(decoded), line0):
                continue
            for m in multi.finditer(decoded):
                start = decoded.rfind("\n", 0, m.start()) + 1
                offset = len(decoded[:start].encode())
                hit = self._try(ref, text, offset, line0 + decoded.count("\n", 0, start), joined=False)
                if hit is not None:
                    yield hit

    def _confirm(self, text: bytes, start: int, line: int, needles: set[str]) -> Iterator[Hit]:
        data = _raw(text, start)
        raw = data.decode("utf-8", "replace")
        low = raw.lower()
        plain = "\r" not in raw
        for needle in sorted(needles):  # sorted: which checks a spent budget leaves out does not vary by run
            if needle in self.bulk:  # a line cached before its needle went to bulk: _bulk covers it
                continue
            self.needle_lines[needle] += 1
            inline = needle in low
            for ref in self.by_needle[needle]:
                if (ref.key, line) in self.seen or self.counts[ref.key] >= MAX_HITS_PER_SIGNATURE:
                    continue
                if not self._afford(len(data) + STEP_COST, line):  # a pass of the signature over the line
                    return  # the others cost as much: the line is counted as not checked in full
                if self._near_miss(ref, inline, plain, raw):
                    continue
                hit = self._try(ref, text, start, line, joined=not inline, data=data, raw=raw)
                if hit is not None:
                    self.counts[ref.key] += 1
                    yield hit

    def _near_miss(self, ref: SigRef, inline: bool, plain: bool, raw: str) -> bool:
        """With no two-line attempts left, the usual near miss is decided in place (as in _alone)."""
        if self.pair_tries[ref.key] < MAX_PAIR_TRIES:
            return False
        if not inline:
            return True
        if plain and ref.plain:
            return ref.pattern.search(raw) is None
        return match_line(ref.pattern, raw) is None

    def _bulk(self, text: bytes, line0: int) -> Iterator[Hit]:
        """Lines of this chunk that a bulk signature matches on its own: one search per line that has a match
        start (the search is leftmost, so a line with a match is never passed over), verified on the line."""
        decoded = text.decode("utf-8", "replace")
        refs = {r.key: r for needle in sorted(self.bulk) for r in self.by_needle[needle]}
        for ref in refs.values():
            if not self._afford(len(decoded), line0):  # one search over the chunk
                continue
            pos, counted, line = 0, 0, line0
            while self.counts[ref.key] < MAX_HITS_PER_SIGNATURE and (m := ref.pattern.search(decoded, pos)):
                start = decoded.rfind("\n", 0, m.start()) + 1
                end = decoded.find("\n", m.start())
                end = len(decoded) if end < 0 else end
                line += decoded.count("\n", counted, start)
                counted = start
                if (ref.key, line) not in self.seen and (seg := match_line(ref.pattern, decoded[start:end])):
                    self.seen.add((ref.key, line))
                    self.counts[ref.key] += 1
                    yield Hit(ref, line, seg, line)
                pos = end + 1

    def _alone(self, ref: SigRef, data: bytes, raw: str) -> str | None:
        """The piece of this line the signature matches on its own, if any."""
        if ref.plain and "\r" not in raw:
            # no anchors or lookbehinds: the whole line holds a match exactly when its unprefixed text does,
            # so one search decides the usual miss
            return match_line(ref.pattern, raw) if ref.pattern.search(raw) else None
        alone = (ref.key, hash(data))
        if alone in self.misses:  # logs repeat lines: a line that did not match once never will
            return None
        seg = match_line(ref.pattern, raw)
        if seg is None:
            self._miss(alone)
        return seg

    def _try(self, ref: SigRef, text: bytes, start: int, line: int, joined: bool, data: bytes | None = None,
             raw: str | None = None) -> Hit | None:
        data = _raw(text, start) if data is None else data
        if joined:  # the required text is not on this line alone: a message wrapped onto two lines?
            return self._try_pairs(ref, _neighbours(text, start, line, data))
        if (ref.key, line) in self.seen:
            return None
        raw = data.decode("utf-8", "replace") if raw is None else raw
        seg = self._alone(ref, data, raw)
        if seg is not None:
            self.seen.add((ref.key, line))
            return Hit(ref, line, seg, line)
        if self.pair_tries[ref.key] >= MAX_PAIR_TRIES:
            return None  # this signature's near misses used up its budget for wrapped messages
        # the message starts here but may go on below (`>>> torch.cuda.is_available()` / `False`): only
        # worth trying when what it requires ends the line
        low = raw.rstrip().lower()
        next_start = text.find(b"\n", start) + 1
        needles = self.needles.get(ref.key, frozenset())
        if 0 < next_start < len(text) and any(0 <= len(low) - low.rfind(n) - len(n) <= TAIL for n in needles):
            return self._try_pairs(ref, [(line, data, _raw(text, next_start))])
        return self._try_pairs(ref, [])

    def _try_pairs(self, ref: SigRef, pairs: list[tuple[int, bytes, bytes]]) -> Hit | None:
        """The first of these (first line, line, next line) pairs the signature matches across the seam."""
        if self.pair_tries[ref.key] >= MAX_PAIR_TRIES:
            return None
        self.pair_looks[ref.key] += len(pairs)
        if self.pair_looks[ref.key] >= MAX_PAIR_LOOKS:  # near misses by the thousand: this line alone from now on
            self.pair_tries[ref.key] = MAX_PAIR_TRIES
        for first_line, a_data, b_data in pairs:
            if (hit := self._try_pair(ref, first_line, a_data, b_data)) is not None:
                return hit
        return None

    def _try_pair(self, ref: SigRef, first_line: int, a_data: bytes, b_data: bytes) -> Hit | None:
        needles = self.needles.get(ref.key, frozenset())
        # cheap test first, on bytes (4 bytes per character at most): does a required string span the end
        # of `a` and the start of `b`?
        sep = separator(a_data, b_data)
        seam = a_data.rstrip()[-4 * SEAM :].lower() + sep + b_data.lstrip()[: 4 * SEAM].lower()
        if needles and not any(n.encode() in seam for n in needles):
            return None
        pair = (ref.key, hash(a_data), hash(b_data))
        if pair in self.misses or (ref.key, first_line) in self.seen:
            return None
        a, b = a_data.decode("utf-8", "replace"), b_data.decode("utf-8", "replace")
        seam_text = f"{a.rstrip()[-SEAM:]}{sep.decode()}{b.lstrip()[:SEAM]}".lower()
        if needles and not any(n in seam_text for n in needles):
            self._miss(pair)
            return None
        if not self._afford(len(a_data) + len(b_data) + STEP_COST, first_line):
            return None
        self.pair_tries[ref.key] += 1
        return self._joined_hit(ref, first_line, a, b, pair)

    def _joined_hit(self, ref: SigRef, first_line: int, a: str, b: str, pair: tuple[int, ...]) -> Hit | None:
        both = join_lines(a, b)
        if not ref.pattern.search(both):
            self._miss(pair)
            return None
        if match_line(ref.pattern, a) or match_line(ref.pattern, b):
            return None  # a line that matches alone is found (and quoted) on its own
        self.seen.add((ref.key, first_line))
        return Hit(ref, first_line, both, first_line + 1)

    def _afford(self, cost: int, line: int) -> bool:
        """Pay for a check of line `line` from the budget; False (the check counted as left out) when the log
        up to the current line has not earned it."""
        if self.budget.spend(cost, self.upto):
            return True
        self.budget.skip(line)
        return False

    def _miss(self, key: tuple[int, ...]) -> None:
        if len(self.misses) >= MAX_MISSES:
            self.misses.clear()
        self.misses.add(key)


def _neighbours(text: bytes, start: int, line: int, data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(first line, line, next line) for the line above and the line below, where there are such lines."""
    pairs = []
    if start > 0:
        pairs.append((line - 1, _raw(text, text.rfind(b"\n", 0, start - 1) + 1), data))
    next_start = text.find(b"\n", start) + 1
    if 0 < next_start < len(text):
        pairs.append((line, data, _raw(text, next_start)))
    return pairs


def _raw(text: bytes, start: int) -> bytes:
    end = text.find(b"\n", start)
    return text[start:] if end < 0 else text[start:end]


def _line(text: bytes, start: int) -> str:
    end = text.find(b"\n", start)
    return (text[start:] if end < 0 else text[start:end]).decode("utf-8", "replace")
