"""Warnings the run got past: evidence from a warning line counts as a symptom when the log ends in a plain Python
error of the program's own that no rule recognises.

A library that a warning says could not load (TensorFlow's "W ... Could not load dynamic library 'libcudart.so.11.0'",
torch's "UserWarning: Could not load library libcudnn_cnn_infer.so.8", pip's "WARNING: ...") is often harmless: the
run goes on, and when it then dies on a KeyError in its data loader or a FileNotFoundError for its tokenizer, that
error is the cause, not the warning. Naming the warning as the root cause would send the user to reinstall CUDA
libraries for a typo. The warning's evidence is kept (a symptom: it is listed, and still speaks when a real cause
line joins it); only a Python error that CUDA libraries never raise counts as "the program's own": a RuntimeError,
OSError or ImportError may well be the warning's consequence, and then nothing is demoted.
"""

from __future__ import annotations

import dataclasses
import re

from olmo_doctor.diagnose.scan import Hit

# a warning line: Python's `file.py:12: UserWarning: ...`, pip's `WARNING: ...`, glog's `W1201 ...` and
# TensorFlow's `2024-05-01 10:00:00.123: W tensorflow/....cc:64] ...` (all bounded: a hit's line can be long)
_WARNING = re.compile(r"\b[A-Z]\w{0,40}Warning: |^\s{0,8}WARNING: |^(?:\[[^\]]{0,60}\]:?\s?)?W\d{4} "
                      r"|\d: W [\w/.-]{1,200}\.cc:\d{1,6}\]")
# the last line of a traceback, for an exception of the program's own (an optional `[rank0]:` prefix and module)
_OWN_ERROR = re.compile(r"^(?:\[[^\]]{0,60}\]:?\s?)?(?:[A-Za-z_][\w.]{0,80}\.)?(?:KeyError|ValueError|TypeError|"
                        r"IndexError|NameError|AttributeError|FileNotFoundError|ZeroDivisionError|KeyboardInterrupt|"
                        r"SyntaxError|IndentationError|UnboundLocalError|JSONDecodeError|StopIteration|"
                        r"RecursionError|IsADirectoryError|NotADirectoryError|UnicodeDecodeError)(?::|$)")
# any exception line (what a traceback ends with), to find the last one the log reports
_ANY_ERROR = re.compile(r"^(?:\[[^\]]{0,60}\]:?\s?)?(?:[A-Za-z_][\w.]{0,80}\.)?([A-Z]\w{0,60}?(?:Error|Exception|"
                        r"Interrupt|Iteration|Exit))(?::|$)")
# launchers that re-raise a worker's failure after its traceback: torchrun's summary ends in its own traceback
_WRAPPERS = frozenset({"ChildFailedError", "SystemExit", "CalledProcessError"})
_TAIL_BYTES = 64 << 10  # a traceback's last line is near the end of what was kept


def final_own_error(tail: bytes, tail_line: int) -> int | None:
    """The line number of the log's last exception line, skipping a launcher's re-raise after it (torchrun's
    ChildFailedError summary), if that is a plain Python error of the program's own; None otherwise (no exception
    line at all, or the last one is not the program's own)."""
    cut = max(0, len(tail) - _TAIL_BYTES)
    start = tail.rfind(b"\n", 0, cut) + 1 if cut else 0
    first = tail_line + tail.count(b"\n", 0, start)
    rows = tail[start:].decode("utf-8", "replace").split("\n")
    for i in range(len(rows) - 1, -1, -1):
        row = rows[i].strip()
        m = _ANY_ERROR.match(row)
        if m is None or m.group(1) in _WRAPPERS:
            continue
        return first + i if _OWN_ERROR.match(row) else None
    return None


def demote(hits: list[Hit], tail: bytes, tail_line: int) -> list[Hit]:
    """The hits, with those on warning lines turned into symptoms when the run then failed on its own error that no
    hit explains."""
    error = final_own_error(tail, tail_line)
    if error is None or any(h.line <= error <= h.end_line for h in hits):
        return hits
    return [dataclasses.replace(h, ref=dataclasses.replace(h.ref, role="symptom"))
            if h.line < error and h.ref.role != "symptom" and _WARNING.search(h.text) else h for h in hits]
