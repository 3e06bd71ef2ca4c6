"""What is not a report, said in one line (exit 2) rather than judged:

- a text that states nothing about the GPU, the driver, the CUDA toolkit, torch, its kernels or Python (a
  traceback alone, a question, a config file): there is no machine to judge;
- documentation of this tool (its README, a page of its docs): it shows olmo-doctor's commands and olmo-doctor's
  own example output, which describes the machine the docs were written on, not the reader's;
- a saved report in a format this release does not read (written by a newer olmo-doctor, or edited).

olmo-doctor's own summary lines ("✓ GPU   NVIDIA H200 (cc 9.0 ...)") are never read as facts: they are this tool's
rendering of some machine, lossy by design; `olmo-doctor report -o FILE` is the form meant to be read back.
"""

from __future__ import annotations

import re

from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts
from olmo_doctor.rules.causes import AREAS

REPORT_FORMAT = 1
# facts about the machine's GPU stack (its libraries included) or Python: a text stating none is no report
_MACHINE = ("gpu.", "driver.", "nvcc.", "cuda.", "cudnn.", "torch.", "python.version", "flash_attn", "xformers")
# stated absences that still describe the machine: "PyTorch version: N/A", "No CUDA" (no GPU)
_ABSENCE_COUNTS = {"torch.version", "gpu.count", "nvcc.version"}
# a command of this project's own CLIs in a usage line ("olmo-doctor check --json", "olmo train --smoke")
_OWN_COMMAND = re.compile(r"(?<![\w/.-])olmo(?:-doctor)? ([a-z][a-z-]{1,30})(?![\w-])")
_DOCS_COMMANDS = 4
# this tool's summary line for an area: a status mark, the area, its line
_OWN_SUMMARY = re.compile(r"^\s{0,4}[✓✗!?•]\s{1,3}(?:" + "|".join(re.escape(a) for a in AREAS) + r")\s{2,}")
_OWN_HEADER = re.compile(r"^\s{0,4}olmo-doctor \d{1,4}\.\d{1,4}[\w.]{0,40} · ")


_MARKS = set("✓✗!?•o")  # what a summary line or the header starts with
# the last line of `check`'s output: its verdict
_OWN_VERDICT = re.compile(r"^\s{0,4}(?:✓ Ready\.|✗ \d{1,4} problem\(s\)|! No blocking problems)")


def own_output(lines: list[str]) -> set[int]:
    """Indexes of lines that are olmo-doctor's own human output: `check`'s whole block (from its header line to
    its verdict: the area lines, its findings' messages, the recommended environment), and area lines pasted
    without it. They describe some machine in this tool's words; the reader reads people's and tools' words."""
    out: set[int] = set()
    inside = False
    for i, line in enumerate(lines):
        if not inside and line.lstrip()[:1] not in _MARKS:
            continue  # the common case, decided without a regex
        if _OWN_HEADER.match(line):
            inside = True
        if inside or _OWN_SUMMARY.match(line):
            out.add(i)
        if inside and _OWN_VERDICT.match(line):
            inside = False
    return out


def is_documentation(lines: list[str]) -> bool:
    """Documentation of this tool: it names several of olmo-doctor's or olmo's commands (a user's paste about a
    machine names one or two at most)."""
    commands = {m.group(1) for line in lines for m in _OWN_COMMAND.finditer(line)}
    return len(commands) >= _DOCS_COMMANDS


def states_a_machine(facts: Facts) -> bool:
    return any(k.startswith(_MACHINE) and (v is not None or k in _ABSENCE_COUNTS) for k, v in facts.items())


def check_format(data: dict[str, object], mark: str) -> None:
    """A saved report names its format; refuse one this release does not read."""
    if mark not in data:
        return  # `check --json` output and older saves: the facts layout is the same
    declared = data[mark]
    if isinstance(declared, bool) or declared != REPORT_FORMAT:
        shown = repr(declared) if len(repr(declared)) <= 20 else repr(declared)[:17] + "..."
        raise UsageError(f"report format {shown} is not one this olmo-doctor reads (format {REPORT_FORMAT}); "
                         "write the report again with this version (`olmo-doctor report -o FILE`) or upgrade "
                         "olmo-doctor where you read it")
