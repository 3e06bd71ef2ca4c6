"""Near-miss lines built from a regex's own parse tree, to show that a pattern runs in linear time.

For each pattern: an example string it matches, cut at every element and every repeat, and from those pieces
lines of a given size: the example minus its last character repeated, each prefix repeated, each prefix followed
by a long run of what a repeat accepts, and a whole line of that run. A backtracking engine is quadratic on at
least one of these when a pattern has an unbounded repeat that can scan past where the match must fail.
"""

from __future__ import annotations

try:  # Python >= 3.11
    import re._constants as _c
    import re._parser as _parser
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _parser
from typing import Any

_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_CANDIDATES = "xa0 ._-/:'\"()[]|,=+<>#\\\t;A9zZ@!"
_CATEGORY = {
    _c.CATEGORY_DIGIT: str.isdigit, _c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdigit(),
    _c.CATEGORY_SPACE: str.isspace, _c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
    _c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
    _c.CATEGORY_NOT_WORD: lambda ch: not (ch.isalnum() or ch == "_"),
}


def _member(av: list[tuple[Any, Any]], ch: str) -> bool:
    negate, hit = False, False
    for op, v in av:
        if op is _c.NEGATE:
            negate = True
        elif op is _c.LITERAL:
            hit |= ch.lower() == chr(v).lower()
        elif op is _c.RANGE:
            hit |= v[0] <= ord(ch) <= v[1] or v[0] <= ord(ch.lower()) <= v[1] or v[0] <= ord(ch.upper()) <= v[1]
        elif op is _c.CATEGORY:
            hit |= _CATEGORY.get(v, lambda _ch: False)(ch)
    return hit != negate


def _char(op: Any, av: Any) -> str:
    """A character this one-character node accepts."""
    if op is _c.LITERAL:
        return chr(av)
    if op is _c.NOT_LITERAL:
        return "x" if av != ord("x") else "y"
    if op is _c.ANY:
        return "x"
    if op is _c.IN:
        return next((ch for ch in _CANDIDATES if _member(av, ch)), "x")
    return ""


class _Builder:
    """Walks a parse tree into an example string; `cuts` are (position, run) pairs: where an element starts and,
    for a repeat, one copy of what it repeats (empty for other elements)."""

    def __init__(self, branch: int) -> None:
        self.branch = branch
        self.text = ""
        self.cuts: list[tuple[int, str]] = []

    def walk(self, items: Any, top: bool = False) -> None:
        for op, av in items:
            start = len(self.text)
            if op in _REPEATS:
                low, high, body = av
                before = len(self.text)
                self.walk(body.data)
                one = self.text[before:]
                self.text += one * (max(low, 1) - 1)
                if high > 3:
                    self.cuts.append((start, one))
                continue
            if op is _c.SUBPATTERN:
                self.walk(av[-1].data)
            elif op is _c.BRANCH:
                branches = av[1]
                self.walk(branches[min(self.branch, len(branches) - 1)].data)
            elif getattr(_c, "ATOMIC_GROUP", None) is not None and op is _c.ATOMIC_GROUP:
                self.walk(av.data)
            else:
                self.text += _char(op, av)
                if op is _c.LITERAL:
                    continue  # a literal run is cut where it ends (and one short of that), not at every character
            if top:
                self.cuts.append((start, ""))
                if start > 0:
                    self.cuts.append((start - 1, ""))


def _branches(items: Any) -> int:
    most = 1
    for op, av in items:
        if op is _c.BRANCH:
            most = max(most, len(av[1]), *(_branches(b.data) for b in av[1]))
        elif op is _c.SUBPATTERN:
            most = max(most, _branches(av[-1].data))
        elif op in _REPEATS:
            most = max(most, _branches(av[2].data))
    return most


def _fill(piece: str, size: int) -> str:
    return (piece * (size // max(len(piece), 1) + 1))[:size] if piece else ""


def recipes(pattern: str) -> dict[str, tuple[str, str]]:
    """How each near-miss line of this pattern is built, by name: (head, unit), the line being the head then
    the unit repeated."""
    parsed = _parser.parse(pattern)
    out: dict[str, tuple[str, str]] = {}
    for branch in range(min(_branches(parsed.data), 8)):
        b = _Builder(branch)
        b.walk(parsed.data, top=True)
        example = b.text
        if len(example) > 1:
            out[f"b{branch}: example minus its last character, repeated"] = ("", example[:-1] + " ")
        for pos, run in b.cuts:
            prefix = example[:pos]
            if prefix:
                out[f"b{branch}: prefix {prefix!r} repeated"] = ("", prefix)
            if run.strip(" ") or run == " ":
                out[f"b{branch}: prefix {prefix!r} then a run of {run!r}"] = (prefix, run)
                out[f"b{branch}: a run of {run!r}"] = ("", run)
                out[f"b{branch}: prefix {prefix!r} and 40 of {run!r}, repeated"] = ("", prefix + run * 40)
    return out


def build(recipe: tuple[str, str], size: int) -> str:
    head, unit = recipe
    return (head + _fill(unit, size))[:size]


def near_misses(pattern: str, size: int = 1 << 20) -> dict[str, str]:
    """Adversarial lines of `size` characters for this pattern, by a name saying how each was built."""
    lines = {label: build(recipe, size) for label, recipe in recipes(pattern).items()}
    return {k: v for k, v in lines.items() if v}


def write_adversarial_log(path: Any, megabytes: int = 50, patterns: list[str] | None = None) -> None:
    """A hostile log of about `megabytes` MB: near-miss lines of every pattern (short and 4 KB long), one huge
    line without a newline, an ANSI escape storm, carriage-return progress bars, and a real cause at the end."""
    from olmo_doctor.rules.model import load_rules

    if patterns is None:
        patterns = [s.pattern.pattern for r in load_rules() for s in r.signatures]
    short, long = [], []
    for pattern in patterns:
        for text in near_misses(pattern, 160).values():
            short.append(text)
        for text in list(near_misses(pattern, 4000).values())[:3]:
            long.append(text)
    target = megabytes * 1_000_000
    with open(path, "wb") as out:
        def fill(parts: list[str], share: float) -> None:
            budget, i = int(target * share), 0
            block = "\n".join(parts).encode("utf-8", "replace") + b"\n"
            while budget > 0:
                out.write(block[:budget])
                budget -= len(block)
                i += 1

        fill(short, 0.40)
        out.write(b"\n")
        fill(long, 0.20)
        out.write(b"\n" + (b"NCCL WARN " * 10) * (target // 100 // 8) + b"\n")  # 10 % in one line
        storm = b"\x1b[2K\x1b[1G\x1b[31m 45%|\xe2\x96\x88\xe2\x96\x88   | 12/40 [00:03<00:07]\x1b[0m\r"
        out.write(storm * (int(target * 0.15) // len(storm)) + b"\n")  # one redrawn progress bar
        out.write((b"\x1b[0m\x1b]0;title\x07\x1b[1;32m" * 40 + b"\n") * (int(target * 0.15) // 1000))
        out.write(b"c++: fatal error: Killed signal terminated program cc1plus\n")


def write_near_miss_flood(path: Any, megabytes: int = 64) -> None:
    """Distinct lines that each carry the required words of every signature (so every line passes the prefilter
    for every signature and no cache helps), then a real cause as the last line: the log that made the scan cost
    one regex pass per signature per line before its work budget."""
    import random

    from olmo_doctor.diagnose.literals import candidates
    from olmo_doctor.rules.model import load_rules

    words = sorted({w for r in load_rules() for s in r.signatures for alt in candidates(s.pattern) for w in alt})
    rnd = random.Random(0)
    target, size, i = megabytes << 20, 0, 0
    with open(path, "w") as out:
        while size < target:
            rnd.shuffle(words)
            line = f"{i} " + " | ".join(words) + f" {i}\n"
            out.write(line)
            size, i = size + len(line), i + 1
        out.write("c++: fatal error: Killed signal terminated program cc1plus\n")
