"""Regex DoS in the report reader: a pasted report is user input, so every pattern applied to it must run in
linear time. Each case is a long near-miss line (a label, a gutter or a package line followed by a long blank run)
that made a lazy group or an unanchored blank run re-scan the line at every position; it is read at 25 K and at
100 K characters, and the second must cost about 4 times the CPU time of the first, not 16 (tests/scaling.py).
The quadratic forms took minutes at 200 K."""

from __future__ import annotations

import pytest

from olmo_doctor.report import parse_text
from olmo_doctor.reports import paste
from tests.scaling import assert_linear

PREFIXES = ["", "| ", "│ ", "> ", "[pip3] torch==", "[pip3] ", "[conda] torch ", "PyTorch version:", "GPU 0: ",
            "    ", "1 | ", "torch==2.6.0", "CUDA runtime version: "]
# (unit, tail): the line is the prefix, the unit repeated to the size, then the tail
FILLERS = [(" ", "x"), ("\t", "|x"), (" ", "| x"), ("1.", " "), (": ", "x"), ("| ", "x"), ("a ", "|")]
SIZE = 25_000


def _report(prefix: str, filler: int, size: int) -> str:
    unit, tail = FILLERS[filler]
    return "PyTorch version: 2.6.0\n" + prefix + unit * (size // len(unit)) + tail + "\nIs CUDA available: True\n"


def _read(text: str) -> None:
    paste.unwrap(text)
    parse_text(text)


@pytest.mark.parametrize("filler", range(len(FILLERS)))
@pytest.mark.parametrize("prefix", PREFIXES)
def test_report_parsing_is_linear_on_long_near_miss_lines(prefix: str, filler: int) -> None:
    assert_linear(_read, lambda n: _report(prefix, filler, n), SIZE, (prefix, filler))


def test_the_check_fails_a_quadratic_reader() -> None:
    """The harness can fail: an unanchored blank run before a required character (the shape these reports
    defeated) re-scans the rest of the line from every position."""
    import re

    quadratic = re.compile(r"[ \t]+\S")
    with pytest.raises(AssertionError, match="the CPU time"):
        assert_linear(quadratic.search, lambda n: " " * n, 500, "quadratic")
    assert_linear(re.compile(r"(?<![ \t])[ \t]+\S").search, lambda n: " " * n, 50_000, "linear")
