"""`diagnose`: name the root cause of a failed build, import or training run from its log.

    from olmo_doctor.diagnose import diagnose_file, diagnose_text
    findings = diagnose_text(log_text)            # ranked, root cause first; [] when nothing is recognised
    findings = diagnose_file("build.log", facts)  # facts (e.g. from a report) sharpen the ranking

The signatures live in the rules (`known_issues/*.toml`, `[[signature]]`), so one rule both checks a machine and
recognises its failure in a log. `reader` turns any input into UTF-8 chunks that end on line boundaries (`window`
bounds what it keeps: huge logs, huge lines, compression bombs, escape storms; `Cuts` says what was left out), `scan`
finds the lines signatures match (fast: `literals` and `grams` build a prefilter; `seams` joins a line to the
next for signatures that span a line break), `rank` orders the evidence by
cause so the root cause comes first, `present` words the findings and `output` prints them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from olmo_doctor.diagnose.asides import demote
from olmo_doctor.diagnose.present import to_diagnosis
from olmo_doctor.diagnose.rank import Evidence, confidence, rank
from olmo_doctor.diagnose.reader import LogReader, iter_chunks
from olmo_doctor.diagnose.scan import Hit, Index, Scanner
from olmo_doctor.diagnose.window import Cuts, lines
from olmo_doctor.facts import Facts, FactValue
from olmo_doctor.findings import Finding
from olmo_doctor.rules.model import Rule, load_rules

__all__ = ["Diagnosis", "diagnose", "diagnose_file", "diagnose_text"]

# Logs up to this size are kept in memory so "nothing recognised" can still quote their error lines.
KEEP_TEXT = 64 << 20


@dataclass
class Diagnosis:
    findings: list[Finding]
    evidence: list[Evidence]
    lines: int = 0
    size: int = 0  # bytes of UTF-8
    elapsed_s: float = 0.0
    facts: Facts = field(default_factory=dict)
    tail: bytes = b""  # the log (or its last chunk when huge), for the "nothing recognised" advice
    tail_line: int = 1  # the line number `tail` starts at
    cuts: Cuts = field(default_factory=Cuts)  # what of the input was not scanned (empty: all of it)

    @property
    def found(self) -> bool:
        """Was a cause found? A cause line in the log, or a cause the facts confirm; lines that only echo many
        causes (symptoms) are not enough."""
        return any(ev.tier != 2 for ev in self.evidence)

    @property
    def from_log(self) -> list[Finding]:
        """Findings the log itself shows (the rest come from machine facts alone)."""
        return [f for f, ev in zip(self.findings, self.evidence, strict=True) if ev.hits]


_INDEXES: dict[int, tuple[tuple[Rule, ...], Index]] = {}


def _index(rules: tuple[Rule, ...]) -> Index:
    """The signature index of a rule set, built once (rules hold dicts, so they are cached by identity)."""
    cached = _INDEXES.get(id(rules))
    if cached is None or cached[0] is not rules:
        if len(_INDEXES) > 8:
            _INDEXES.clear()
        cached = _INDEXES[id(rules)] = (rules, Index.build(rules))
    return cached[1]


class _Tail:
    """The log's last KEEP_TEXT bytes or so, contiguous, and the number of their first line."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.line, self.size = 1, 0

    def restart(self) -> None:
        self.size = KEEP_TEXT  # the kept text must be contiguous: keep from the next chunk on

    def add(self, chunk: bytes, first_line: int) -> None:
        self.size += len(chunk)
        if self.size <= KEEP_TEXT:
            self.chunks.append(chunk)
        else:
            self.chunks, self.line, self.size = [chunk], first_line, len(chunk)


def _scan(scanner: Scanner, pieces: Iterable[bytes | str], reader: LogReader | None) -> tuple[list[Hit], _Tail, int]:
    """The hits of every chunk, the log's tail, and its size in bytes."""
    hits: list[Hit] = []
    tail, size = _Tail(), 0
    for piece in pieces:
        chunk = piece.encode() if isinstance(piece, str) else piece
        if reader is not None and reader.line != scanner.line:  # the reader skipped the middle of a huge log
            scanner.jump(reader.line)
            tail.restart()
        first_line = scanner.line
        hits += scanner.feed(chunk)
        size += len(chunk)
        tail.add(chunk, first_line)
    return hits, tail, size


def diagnose(
    chunks: Iterable[bytes | str], facts: Mapping[str, FactValue] | None = None, rules: tuple[Rule, ...] | None = None
) -> Diagnosis:
    """Scan log chunks (UTF-8 bytes or text, each ending at a line boundary) and rank what they show."""
    start = time.perf_counter()
    rules = rules if rules is not None else load_rules()
    facts = facts or {}
    scanner = Scanner(_index(rules))
    reader = chunks if isinstance(chunks, LogReader) else None
    cuts = reader.cuts if reader is not None else Cuts()
    # chunks from a caller (a string, a list) get the same bounds as a file: long lines cut, escapes stripped
    hits, tail, size = _scan(scanner, chunks if reader is not None else _bounded(chunks, cuts), reader)
    lines = scanner.line - 1
    hits = sorted(hits + scanner.finish(), key=lambda h: h.line)
    cuts.unchecked, cuts.first_unchecked_line = scanner.budget.skipped, scanner.budget.first_skipped_line
    text = b"".join(tail.chunks)
    # a warning the run got past is not the cause of the error it then died on (asides.py)
    evidence = rank(demote(hits, text, tail.line), rules, facts)
    confs = confidence(evidence)
    findings = [to_diagnosis(ev, facts, c) for ev, c in zip(evidence, confs, strict=True)]
    return Diagnosis(findings, evidence, lines, size, time.perf_counter() - start, dict(facts), text, tail.line, cuts)


def _bounded(chunks: Iterable[bytes | str], cuts: Cuts) -> Iterator[bytes]:
    raw = (c.encode() if isinstance(c, str) else c for c in chunks)
    return (piece for piece in lines(raw, cuts) if isinstance(piece, bytes))


def diagnose_text(text: str, facts: Mapping[str, FactValue] | None = None) -> list[Finding]:
    """Ranked findings for a log given as a string (root cause first); [] when nothing is recognised."""
    if not text.strip():
        return []
    return diagnose([text], facts).findings


def diagnose_file(path: str | Path | BinaryIO, facts: Mapping[str, FactValue] | None = None) -> list[Finding]:
    """Ranked findings for a log file (any size or encoding, gzip too; "-" reads standard input).

    Raises olmo_doctor.errors.UsageError when the file is missing, empty or binary.
    """
    return diagnose(iter_chunks(path), facts).findings
