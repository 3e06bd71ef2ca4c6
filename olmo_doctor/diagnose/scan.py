"""Find every line of a log that a rule signature matches, fast enough for a 50 MB build log.

Running ~200 signatures over every line would take minutes, so the scan works in two steps:

1. Prefilter. Each signature requires some literal text (`literals.required`). From each required string we take
   a short *gram* that starts at its rarest character (rarity sampled from this very log), and one regex of all
   grams, dispatching on that first character, finds the few positions worth a look. Python's regex engine skips
   every position whose character cannot start a gram in C, so the cost barely grows with the number of rules.
2. Confirm. On each line a gram hit, the full required string must be there, and then the signature's own regex
   runs on that line (split at carriage returns, tool prefixes removed). A required string split over two lines
   (issue trackers wrap long lines) is tried on the line joined with its neighbour.

Signatures without any required literal run on every line; tests keep the shipped rules off that slow path.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from olmo_doctor.diagnose.literals import Alt, required, weakest
from olmo_doctor.diagnose.reader import PREFIX
from olmo_doctor.rules.model import Rule

GRAM_MAX = 16
MIN_NEEDLE = 3


@dataclass(frozen=True)
class SigRef:
    """One signature of one rule, with what the prefilter needs."""

    key: int
    rule: Rule
    index: int
    pattern: re.Pattern[str]
    weight: float
    role: str
    needles: Alt | None


@dataclass(frozen=True)
class Hit:
    ref: SigRef
    line: int  # 1-based line number of the (first) matched line
    text: str  # the matched line as shown to the user
    end_line: int  # the last line, when a wrapped message spans two


@dataclass
class Index:
    """All signatures of a rule set, grouped by the strings they require."""

    refs: list[SigRef]
    by_needle: dict[str, list[SigRef]] = field(default_factory=dict)
    slow: list[SigRef] = field(default_factory=list)

    @classmethod
    def build(cls, rules: Iterable[Rule]) -> Index:
        refs: list[SigRef] = []
        for rule in rules:
            for i, sig in enumerate(rule.signatures):
                needles = required(sig.pattern)
                if weakest(needles) < MIN_NEEDLE:
                    needles = None
                refs.append(SigRef(len(refs), rule, i, sig.pattern, sig.weight, sig.role, needles))
        index = cls(refs)
        for ref in refs:
            if ref.needles is None:
                index.slow.append(ref)
            else:
                for needle in ref.needles:
                    index.by_needle.setdefault(needle, []).append(ref)
        return index


def _gram(needle: str, start: int) -> str:
    """From `start` to the end of its word (wrapping never splits it), at least 4 and at most GRAM_MAX chars."""
    end = needle.find(" ", start)
    end = len(needle) if end < 0 else end
    end = max(end, start + 4)
    return needle[start : min(end, start + GRAM_MAX, len(needle))]


def _rarity(text: str) -> Counter[str]:
    """Character counts over a few slices of the log (lowercase)."""
    n, width = len(text), 32 << 10
    starts = {0, max(0, n // 3 - width // 2), max(0, 2 * n // 3 - width // 2), max(0, n - width)}
    return Counter("".join(text[s : s + width] for s in sorted(starts)).lower())


def choose_grams(needles: Iterable[str], freq: Counter[str]) -> dict[str, list[str]]:
    """gram -> the needles it stands for. Each needle's gram starts at its rarest non-space character."""
    out: dict[str, list[str]] = {}
    for needle in needles:
        shortest = min(len(needle), 4)
        best: tuple[int, int, str] | None = None
        for i, ch in enumerate(needle):
            if ch.isspace():
                continue
            gram = _gram(needle, i)
            if len(gram) < shortest:
                continue
            cost = (freq.get(ch, 0), -len(gram), gram)
            if best is None or cost < best:
                best = cost
        gram = best[2] if best else needle
        out.setdefault(gram, []).append(needle)
    return out


def gram_regex(grams: Iterable[str]) -> re.Pattern[str]:
    """One regex for all grams, case-insensitive, whose alternatives each start with a literal character.

    The literal first characters let the regex engine build a character-set prefilter, so scanning a position
    that cannot start any gram costs one table lookup in C.
    """
    by_first: dict[str, list[str]] = {}
    for gram in grams:
        by_first.setdefault(gram[0], []).append(gram[1:])
    alts = []
    for first, rests in sorted(by_first.items()):
        rest = "|".join(re.escape(r) for r in sorted(set(rests), key=lambda r: (-len(r), r)))
        for variant in sorted({first, first.upper()}):
            if len(variant) == 1:  # some characters upper-case to two (ß -> SS); the lowercase one is enough
                alts.append(f"{re.escape(variant)}(?i:{rest})")
    return re.compile("|".join(alts) if alts else r"(?!)")


class Scanner:
    """Scans chunks of one log in order; line numbers continue across chunks."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.grams: dict[str, list[str]] | None = None
        self.regex: re.Pattern[str] | None = None
        self.first: dict[str, list[str]] = {}
        self.slow_multiline = [(ref, re.compile(ref.pattern.pattern, ref.pattern.flags | re.M))
                               for ref in index.slow]
        self.line = 1  # number of the first line of the next chunk
        self.carry = ""  # the last line of the previous chunk, for messages wrapped across the boundary
        self.seen: set[tuple[int, int]] = set()

    def _prepare(self, text: str) -> None:
        self.grams = choose_grams(self.index.by_needle, _rarity(text))
        self.regex = gram_regex(self.grams)
        for gram in self.grams:
            self.first.setdefault(gram[0], []).append(gram)

    def feed(self, chunk: str) -> list[Hit]:
        """Hits in this chunk (the chunk ends at a line boundary, except possibly the last one)."""
        if self.regex is None:
            self._prepare(chunk)
        text, line0 = (self.carry + chunk, self.line - 1) if self.carry else (chunk, self.line)
        hits = list(self._scan(text, line0))
        newlines = chunk.count("\n")
        self.line += newlines
        last = chunk.rfind("\n", 0, len(chunk) - 1) + 1 if chunk.endswith("\n") else chunk.rfind("\n") + 1
        self.carry = chunk[last:] if chunk.endswith("\n") else ""
        if not chunk.endswith("\n"):  # an unterminated tail is still one line of its own
            self.line += 1
        return hits

    def _candidates(self, text: str) -> dict[int, set[str]]:
        """Line start offset -> the needles whose gram occurs on that line."""
        assert self.regex is not None and self.grams is not None
        found: dict[int, set[str]] = {}
        search, grams, first = self.regex.search, self.grams, self.first
        line_start, line_end = 0, -1
        pos = 0
        while (m := search(text, pos)) is not None:
            p = m.start()
            if p > line_end:
                line_start = text.rfind("\n", 0, p) + 1
                line_end = text.find("\n", p)
                line_end = len(text) if line_end < 0 else line_end
            for gram in first.get(text[p].lower(), ()):
                if text[p : p + len(gram)].lower() == gram:
                    found.setdefault(line_start, set()).update(grams[gram])
            pos = p + 1
        return found

    def _scan(self, text: str, line0: int) -> Iterator[Hit]:
        starts = sorted(self._candidates(text).items())
        counted, line = 0, line0
        for start, needles in starts:
            line += text.count("\n", counted, start)
            counted = start
            yield from self._confirm(text, start, line, needles)
        for ref, multi in self.slow_multiline:
            for m in multi.finditer(text):
                start = text.rfind("\n", 0, m.start()) + 1
                number = line0 + text.count("\n", 0, start)
                yield from self._try(ref, text, start, number, joined=False)

    def _confirm(self, text: str, start: int, line: int, needles: set[str]) -> Iterator[Hit]:
        low = _line(text, start).lower()
        for needle in needles:
            for ref in self.index.by_needle[needle]:
                if (ref.key, line) in self.seen:
                    continue
                yield from self._try(ref, text, start, line, joined=needle not in low)

    def _try(self, ref: SigRef, text: str, start: int, line: int, joined: bool) -> Iterator[Hit]:
        raw = _line(text, start)
        next_start = text.find("\n", start) + 1
        pairs = []
        if not joined:
            if (ref.key, line) in self.seen:
                return
            seg = _match(ref.pattern, raw)
            if seg is not None:
                self.seen.add((ref.key, line))
                yield Hit(ref, line, seg, line)
                return
            # the message starts here but may go on below (`>>> torch.cuda.is_available()` / `False`)
            if 0 < next_start < len(text):
                pairs.append((line, raw, _line(text, next_start)))
        else:
            # the required text is not on this line alone: a message wrapped onto two lines?
            if start > 0:
                prev_start = text.rfind("\n", 0, start - 1) + 1
                pairs.append((line - 1, _line(text, prev_start), raw))
            if 0 < next_start < len(text):
                pairs.append((line, raw, _line(text, next_start)))
        for first_line, a, b in pairs:
            both = _join(a, b)
            if ref.needles and not any(n in both.lower() for n in ref.needles):
                continue
            if (ref.key, first_line) in self.seen or _match(ref.pattern, a) or _match(ref.pattern, b):
                continue  # a line that matches alone is found (and quoted) on its own
            if ref.pattern.search(both):
                self.seen.add((ref.key, first_line))
                yield Hit(ref, first_line, both, first_line + 1)
                return


def _line(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _segments(raw: str) -> Iterator[str]:
    """The pieces a terminal would have shown: each carriage-return redraw, without tool prefixes."""
    for part in raw.split("\r") if "\r" in raw else (raw,):
        part = PREFIX.sub("", part).rstrip()
        if part:
            yield part


def _match(pattern: re.Pattern[str], raw: str) -> str | None:
    for seg in _segments(raw):
        if pattern.search(seg):
            return seg
    return None


def _join(a: str, b: str) -> str:
    left = next(reversed(list(_segments(a))), "")
    right = next(iter(_segments(b)), "")
    return f"{left.rstrip()} {right.strip()}"
