"""Every regex `diagnose` runs on log text is linear: no signature and no pattern of olmo_doctor/diagnose/ can be
made to backtrack quadratically by a long near-miss line.

Each pattern gets near-miss lines built from its own parse tree (tests/_adversarial.py: its example minus the
last character, each prefix repeated, each prefix followed by a long run of what a repeat accepts). All of them
are timed at 64 KB, where a quadratic pattern is already the slowest by far, and the slowest two again at 256 KB
and 1 MB: 4 times the line must cost about 4 times the CPU time, not 16 (tests/scaling.py). A quadratic pattern
takes minutes on the megabyte line.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

from olmo_doctor import diagnose as diagnose_pkg
from olmo_doctor.rules.model import load_rules
from tests._adversarial import build, recipes
from tests.scaling import GROWTH, assert_linear, cpu_seconds

SMALL, LARGE = 64 << 10, 1 << 20


def _text_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Signatures of the shipped rules and the module-level patterns of the diagnose package."""
    found = [(f"{r.code}#{i}", s.pattern) for r in load_rules() for i, s in enumerate(r.signatures)]
    for info in pkgutil.iter_modules(diagnose_pkg.__path__):
        module = importlib.import_module(f"olmo_doctor.diagnose.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                found.append((f"{info.name}.{name}", value))
    return found


PATTERNS = _text_patterns()


def _time(pattern: re.Pattern[str], line: str) -> float:
    return cpu_seconds(lambda: pattern.search(line))


def _worst(pattern: re.Pattern[str], size: int, keep: int) -> list[tuple[float, str]]:
    timed = [(_time(pattern, build(recipe, size)), label) for label, recipe in recipes(pattern.pattern).items()]
    return sorted(timed, reverse=True)[:keep]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "pattern"), PATTERNS, ids=[n for n, _ in PATTERNS])
def test_pattern_is_linear_on_adversarial_megabyte_lines(name: str, pattern: re.Pattern[str]) -> None:
    for _, label in _worst(pattern, SMALL, keep=2):
        recipe = recipes(pattern.pattern)[label]
        assert_linear(pattern.search, lambda n, r=recipe: build(r, n), LARGE // GROWTH,
                      f"{name} {pattern.pattern!r} ({label})")


def test_the_module_patterns_are_included() -> None:
    names = {n for n, _ in PATTERNS}
    assert {"window.ANSI", "reader.PREFIX", "output._ERROR_LINE"} <= names
    assert sum(1 for n in names if n.startswith("OD")) >= 150


@pytest.mark.parametrize(("quadratic", "linear", "size"), [
    (r"Unknown CUDA arch \([^)]*\) or GPU not supported", r"Unknown CUDA arch \([^)]{0,200}\) or GPU not supported",
     128 << 10),
    (r"\w+ was requested, but nvcc was not found", r"\b\w+ was requested, but nvcc was not found", 8 << 10),
])
def test_the_near_misses_expose_a_quadratic_pattern(quadratic: str, linear: str, size: int) -> None:
    """The harness can fail: the old, unbounded form of a signature is slower on a near-miss line a fraction of
    a megabyte long than its bounded form is on a 1 MB one."""
    bad, good = re.compile(quadratic, re.I), re.compile(linear, re.I)
    slow = _worst(bad, size, keep=1)[0][0]
    fast = _worst(good, LARGE, keep=1)[0][0]
    assert slow > 2 * fast, (slow, fast)
