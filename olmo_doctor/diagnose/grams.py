"""Pick the cheapest way to prefilter this log: which required string per signature, which gram per string.

Python's regex engine scans for a set of possible first characters with a bitmap test per byte (about 5 ns), and
every position that passes costs a full match attempt (about 100 ns). So one regex over short *grams* is fast
when the grams start with characters that are rare in the log at hand. Rarity is measured on a sample of the
log itself, because an NCCL log, a pip log and an nvcc log have different common characters.

    needles = pick_requirements(candidates_per_signature, sample)   # one requirement per signature
    grams = choose_grams(needles, sample)                           # gram -> the needles it stands for
    regex = gram_regex(tuple(grams), order)                         # one pass over the lowercased bytes
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache

from olmo_doctor.diagnose.literals import Alt

GRAM_MAX = 16
# A gram occurrence costs a Python-level step, about this many regex attempts.
HIT_COST = 100.0
OPTIONS = 6
SAMPLE_WIDTH = 16 << 10


def sample(data: bytes) -> bytes:
    """Four slices of the log, lowercased: what its characters and words look like."""
    n, w = len(data), SAMPLE_WIDTH
    starts = sorted({0, max(0, n // 3 - w // 2), max(0, 2 * n // 3 - w // 2), max(0, n - w)})
    return b"".join(data[s : s + w] for s in starts).lower()


def _options(needle: bytes, freq: Mapping[int, int]) -> list[bytes]:
    """Grams a needle can be found by, those starting at its rarest characters first."""
    shortest = min(len(needle.strip()), 3)
    grams = {_gram(needle, i) for i, b in enumerate(needle) if b != 32 and b < 128}
    grams = {g for g in grams if len(g) >= shortest} or {needle.strip()}
    return sorted(grams, key=lambda g: (freq.get(g[0], 0), -len(g), g))[:OPTIONS]


class _Counts(dict[bytes, int]):
    """Occurrences of grams in the sample, counted once each."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self.data = data

    def __missing__(self, gram: bytes) -> int:
        self[gram] = n = self.data.count(gram)
        return n


def _standalone(needle: bytes, freq: Mapping[int, int], counts: _Counts) -> tuple[float, float]:
    """(anchor, hits): the cheapest gram's first-character count and occurrences, each weighed by its cost."""
    return min(((float(freq.get(g[0], 0)), HIT_COST * counts[g]) for g in _options(needle, freq)), key=sum)


def pick_requirements(options: Mapping[int, list[Alt]], data: bytes) -> dict[int, Alt]:
    """For each signature (by key) the requirement that is cheapest to prefilter in this log: its strings'
    gram occurrences, plus the rarest anchor character they need (anchors tend to be shared)."""
    freq, counts = Counter(data), _Counts(data)
    out: dict[int, Alt] = {}
    for key, alts in options.items():
        def cost(alt: Alt) -> tuple[float, int]:
            parts = [_standalone(s.encode(), freq, counts) for s in alt]
            return max(a for a, _ in parts) + sum(h for _, h in parts), -min(len(s) for s in alt)

        out[key] = min(alts, key=cost)
    return out


def _gram(needle: bytes, start: int) -> bytes:
    """From `start` to the end of its word (a wrapped line never splits it), 3 to GRAM_MAX bytes."""
    end = needle.find(b" ", start)
    end = len(needle) if end < 0 else end
    end = max(end, start + 3)
    return needle[start : min(end, start + GRAM_MAX, len(needle))]


def choose_grams(needles: Iterable[str], data: bytes) -> dict[bytes, list[str]]:
    """gram -> the needles it stands for.

    Each needle's gram starts at one of its characters and runs to the end of that word. Every position holding
    a character some gram starts with costs an attempt, every gram occurrence a Python step (HIT_COST attempts),
    so grams are chosen greedily for the least cost on the sample: needles with the fewest cheap options first,
    and a first character another gram already uses costs nothing more.
    """
    freq = Counter(data)
    options = {needle: _options(needle.encode(), freq) for needle in needles}
    hits = _Counts(data)
    chosen: set[int] = set()

    def cost(gram: bytes) -> float:
        return (0.0 if gram[0] in chosen else freq.get(gram[0], 0)) + HIT_COST * hits[gram]

    assign: dict[str, bytes] = {}
    for needle in sorted(options, key=lambda n: (-min(cost(g) for g in options[n]), n)):
        assign[needle] = min(options[needle], key=lambda g: (cost(g), -len(g), g))
        chosen.add(assign[needle][0])
    _drop_first_bytes(assign, options, chosen, freq, hits)
    out: dict[bytes, list[str]] = {}
    for needle, gram in assign.items():
        out.setdefault(gram, []).append(needle)
    return out


def _drop_first_bytes(assign: dict[str, bytes], options: dict[str, list[bytes]], chosen: set[int],
                      freq: Counter[int], hits: _Counts) -> None:
    """Local search: drop a first character when its needles can move to the others' characters for less."""
    for first in sorted(chosen, key=lambda b: -freq.get(b, 0)):
        users = [n for n, g in assign.items() if g[0] == first]
        others = chosen - {first}
        moves = {n: min((g for g in options[n] if g[0] in others), key=lambda g: hits[g], default=None) for n in users}
        if not all(moves.values()):
            continue
        extra = HIT_COST * sum(hits[g] - hits[assign[n]] for n, g in moves.items() if g is not None)
        if extra < freq.get(first, 0):
            assign.update({n: g for n, g in moves.items() if g is not None})
            chosen.discard(first)


@lru_cache(maxsize=8)
def gram_regex(grams: tuple[bytes, ...], order: tuple[tuple[int, int], ...] = ()) -> re.Pattern[bytes]:
    """One regex for all grams over lowercased bytes; one alternative per first character, the commonest first
    (an attempt there then stops early), each alternative starting with a literal so the engine can skip every
    position whose byte starts no gram."""
    counts = dict(order)
    by_first: dict[int, list[bytes]] = {}
    for gram in grams:
        by_first.setdefault(gram[0], []).append(gram[1:])
    alts = []
    for first, rests in sorted(by_first.items(), key=lambda kv: (-counts.get(kv[0], 0), kv[0])):
        rest = b"|".join(re.escape(r) for r in sorted(set(rests), key=lambda r: (-len(r), r)))
        alts.append(re.escape(bytes([first])) + b"(?:" + rest + b")")
    return re.compile(b"|".join(alts) if alts else rb"(?!)")
