"""Text and JSON output of `olmo-doctor diagnose`.

Text: the root cause first with the log lines that show it (with line numbers), what it means, why, and the
exact fix; then less likely causes; then what the machine facts alone show. When nothing is recognised it says
so, quotes the log's first error lines, and says what to collect next: never "all clear" for a failed log.
JSON: the shape of `check --json` (`facts`, `findings`, `env`, `elapsed_s`), each finding with `matched_lines`
and `confidence`, plus `input_cut` (null, or what of the input was not scanned: see `window.Cuts`). The text
output says the same in a note under its first line.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console

from olmo_doctor.diagnose import Diagnosis
from olmo_doctor.diagnose.rank import Evidence
from olmo_doctor.facts import with_defaults
from olmo_doctor.findings import Finding
from olmo_doctor.render import MARK, finding_block, plain

SHOWN_LINES = 5
# Words that mark an error line; found with str.find (fast on any size), then confirmed with _ERROR_LINE.
ERROR_WORDS = ("error", "exception", "fatal", "failed", "failure", "killed", "aborted", "segmentation fault")
_ERROR_LINE = re.compile(r"(?i:\b(?:error|fatal|failed|failure|killed|aborted|segmentation fault|core dumped)\b)"
                         r"|\b[A-Za-z]\w{0,80}(?:Error|Exception)\b")


def to_json(diag: Diagnosis) -> dict[str, Any]:
    return {
        "facts": with_defaults(diag.facts) if diag.facts else {},
        "findings": [f.to_json(diagnose=True) for f in diag.findings],
        "env": {},
        "elapsed_s": round(diag.elapsed_s, 4),
        "input_cut": {**diag.cuts.to_json(), "notes": diag.cuts.sentences()} if diag.cuts else None,
    }


def _word_starts(low: str, word: str, first: int, last: int) -> set[int]:
    """Where the lines holding the first `first` and the last `last` occurrences of `word` start."""
    starts: set[int] = set()
    pos = 0
    for _ in range(first):  # the first occurrences
        p = low.find(word, pos)
        if p < 0:
            break
        starts.add(low.rfind("\n", 0, p) + 1)
        pos = p + 1
    end = len(low)
    for _ in range(last):  # and the last ones
        p = low.rfind(word, 0, end)
        if p < 0:
            break
        starts.add(low.rfind("\n", 0, p) + 1)
        end = p
    return starts


def error_lines(text: str, first: int = 3, last: int = 2, line0: int = 1) -> list[tuple[int, str]]:
    """The first and the last few lines that look like errors, as (line number, text); `text` starts at line
    `line0` of the log."""
    low = text.lower()
    starts = set().union(*(_word_starts(low, word, first, last) for word in ERROR_WORDS))
    found = []
    for start in sorted(starts):
        stop = text.find("\n", start)
        line = text[start : stop if stop >= 0 else len(text)].strip()
        if _ERROR_LINE.search(line):
            found.append((line0 + text.count("\n", 0, start), line[:300]))
    return found if len(found) <= first + last else found[:first] + found[-last:]


def _quote(console: Console, finding: Finding, ev: Evidence) -> None:
    symptoms = {h.line for h in ev.hits if h.ref.role == "symptom"}
    for m in finding.matched_lines[:SHOWN_LINES]:
        tag = " [dim](symptom)[/]" if m.line in symptoms else ""
        # soft wrap: a quoted log line stays whole (copyable); the terminal wraps it
        console.print(f"  [dim]{m.line:>7}[/] [bold]│[/] {plain(m.text)}{tag}", soft_wrap=True)
    more = len({h.line for h in ev.hits}) - min(len(finding.matched_lines), SHOWN_LINES)
    if more > 0:
        console.print(f"    [dim]… and {more} more matching line(s)[/]")


def _block(console: Console, finding: Finding, head: str) -> None:
    lines = finding_block(finding)
    console.print(head, overflow="fold")
    for line in lines[1:]:
        console.print(line, overflow="fold")


Shown = list[tuple[Finding, Evidence]]


def _print_head(console: Console, diag: Diagnosis, name: str) -> None:
    facts = " · with machine facts" if diag.facts else ""
    console.print(f"[bold]olmo-doctor diagnose[/] · {plain(name)} · {diag.lines:,} lines{facts} · "
                  f"{diag.elapsed_s:.2f} s" + ("" if diag.cuts else "\n"))
    if diag.cuts:
        for sentence in diag.cuts.sentences():
            console.print(f"[yellow]Input cut:[/] {plain(sentence)}", overflow="fold")
        console.print()


def _label(i: int, ev: Evidence) -> str:
    if i > 0:
        return f"{i + 1}. "
    return "Root cause: " if ev.tier == 0 else "Likely cause: "


def _print_named(console: Console, named: Shown) -> None:
    """The causes the log names, the most likely first, each with its lines, meaning and fix."""
    for i, (finding, ev) in enumerate(named):
        if i == 1:
            console.print("[bold]Other possible causes[/] (less likely):\n")
        head = (f"{MARK[finding.severity]} [bold]{_label(i, ev)}{finding.code}[/] {plain(finding.title)} "
                f"[dim](confidence {finding.confidence:.2f})[/]")
        console.print(head, overflow="fold")
        _quote(console, finding, ev)
        _block(console, finding, "")
        console.print()


def _print_echoes(console: Console, echoes: Shown) -> None:
    if not echoes:
        return
    console.print("[bold]Lines that often follow these causes[/] (not enough to name one):")
    for finding, ev in echoes:
        console.print(f" • {finding.code} {plain(finding.title)} [dim](olmo-doctor explain {finding.code})[/]",
                      overflow="fold")
        _quote(console, finding, ev)
    console.print()


def _print_facts_only(console: Console, facts_only: Shown) -> None:
    if not facts_only:
        return
    console.print("[bold]Also on this machine[/] (from its facts; the log does not show it):")
    for finding, _ev in facts_only:
        console.print(f" {MARK[finding.severity]} {finding.code} {plain(finding.title)} "
                      f"[dim](olmo-doctor explain {finding.code})[/]", overflow="fold")
    console.print()


def _partition(diag: Diagnosis) -> tuple[Shown, Shown, Shown]:
    """(named: a cause line, or symptoms the facts back; echoes: only lines that follow many causes; facts only)."""
    pairs = list(zip(diag.findings, diag.evidence, strict=True))
    return ([(f, ev) for f, ev in pairs if ev.hits and ev.tier < 2], [(f, ev) for f, ev in pairs if ev.tier == 2],
            [(f, ev) for f, ev in pairs if not ev.hits])


def print_text(diag: Diagnosis, name: str, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=False)
    _print_head(console, diag, name)
    named, echoes, facts_only = _partition(diag)
    _print_named(console, named)
    if not named:
        _nothing(console, diag, name)
    _print_echoes(console, echoes)
    _print_facts_only(console, facts_only)
    if named:
        codes = " / ".join(f.code for f, _ in named[:2])
        console.print(f"[dim]Details and sources: olmo-doctor explain {codes}[/]")


def _nothing(console: Console, diag: Diagnosis, name: str) -> None:
    console.print(f"[yellow bold]? No known root cause recognised in {plain(name)}.[/]")
    errors = error_lines(diag.tail.decode("utf-8", "replace"), line0=diag.tail_line)
    if errors:
        console.print("  It does contain error lines; the first one is usually the root cause:")
        for number, line in errors:
            console.print(f"  [dim]{number:>7}[/] [bold]│[/] {plain(line)}", soft_wrap=True)
    else:
        console.print("  It shows no error line at all: it may have been cut before the failure.")
    console.print("\n  What to collect next:")
    tips = [
        "the complete output from the first command, not only its end: "
        "[cyan]pip install -v --no-build-isolation <package> 2>&1 | tee build.log[/] "
        "(without -v pip hides the compiler's own error)",
        "the machine's facts with it: [cyan]olmo-doctor diagnose build.log --here[/] on the failing machine, or "
        "[cyan]--report collect_env.txt[/] with the output of [cyan]python -m torch.utils.collect_env[/]",
        "for NCCL problems, rerun with [cyan]NCCL_DEBUG=INFO[/] (its WARN lines name the failing transport)",
        "[cyan]olmo-doctor check[/] judges the machine itself, without a log",
    ]
    for tip in tips:
        console.print(f"    • {tip}", overflow="fold")
    console.print()
