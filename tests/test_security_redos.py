"""Regex DoS in the report reader (issue #12): a pasted report is user input, so every pattern applied to it must
run in linear time. Each case is a 200 KB near-miss line (a label, a gutter or a package line followed by a long
blank run) that made a lazy group or an unanchored blank run re-scan the line at every position."""

from __future__ import annotations

import time

import pytest

from olmo_doctor.report import parse_text
from olmo_doctor.reports import paste

PREFIXES = ["", "| ", "│ ", "> ", "[pip3] torch==", "[pip3] ", "[conda] torch ", "PyTorch version:", "GPU 0: ",
            "    ", "1 | ", "torch==2.6.0", "CUDA runtime version: "]
FILLERS = [" " * 200_000 + "x", "\t" * 200_000 + "|x", " " * 200_000 + "| x", "1." * 100_000 + " ",
           ": " * 100_000 + "x", "| " * 100_000 + "x", "a " * 100_000 + "|"]


@pytest.mark.parametrize("filler", range(len(FILLERS)))
@pytest.mark.parametrize("prefix", PREFIXES)
def test_report_parsing_is_linear_on_long_near_miss_lines(prefix: str, filler: int) -> None:
    text = "PyTorch version: 2.6.0\n" + prefix + FILLERS[filler] + "\nIs CUDA available: True\n"
    start = time.monotonic()
    paste.unwrap(text)
    parse_text(text)
    assert time.monotonic() - start < 1.5, (prefix, filler)  # quadratic ones took minutes at this size
