"""Version comparisons follow PEP 440 (packaging), for the strings machines really print: nightlies, a0+git
builds, post releases, local +cuXXX tags, nvcc's V-prefix, driver triples, and text packaging cannot read."""

from __future__ import annotations

import pytest

from olmo_doctor.compat import versions
from olmo_doctor.rules.expr import truth

# (installed version as printed, requirement, does it meet it)
TABLE = [
    ("2.6.0", ">=2.6", True),
    ("2.6.0.dev20241112", ">=2.6", False),  # a nightly is not the release it leads to
    ("2.6.0.dev20241112+cu124", ">=2.6.0", False),
    ("2.7.0.dev20250301+cu128", ">=2.6", True),
    ("2.6.0.dev20241112", ">=2.5", True),
    ("2.11.0a0+git1234abc", ">=2.11", False),
    ("2.11.0a0+git1234abc", ">=2.10", True),
    ("2.6.0rc1", "<2.6", False),  # PEP 440: <V excludes V's own pre-releases, as pip does
    ("2.6.0rc1", ">=2.5,<2.6.0rc2", True),
    ("2.6.0-rc1", "==2.6.0rc1", True),  # non-normalised spelling of the same rc
    ("0.0.28.post3", ">0.0.28", False),  # PEP 440: >V excludes V's post-releases
    ("0.0.28.post3", ">=0.0.28", True),
    ("0.0.28.post3", "==0.0.28", False),
    ("1.0.post1", ">=1.0", True),
    ("2.11.0+cu130", "==2.11.0", True),  # a local tag still is that release
    ("2.11.0+cu130", ">=2.11", True),
    ("2.5.1+cpu", "<2.6", True),
    ("2.1.0+cu12.1", ">=2.1,<2.2", True),
    ("V12.4.131", ">=12.4", True),  # nvcc --version prints a V
    ("12.4.131", "<12.6", True),
    ("580.159.04", ">=580.65.06", True),  # driver triples with leading zeros
    ("535.104.05", ">=580.65.06", False),
    ("525.60.11", ">=525.60.13", False),
    ("1.13.2.git.kitware.jobserver-pipe-1", ">=1.10", True),  # ninja: the readable part is kept
    ("3.12.3 (main, Aug 31 2026)", ">=3.10,<3.14", True),
    ("glibc-2.39", ">=2.28", True),
    ("not a version", ">=1", None),
    ("", ">=1", None),
    ("2.6.0", "not a spec", None),
]


@pytest.mark.parametrize(("version", "spec", "expected"), TABLE)
def test_version_satisfies(version: str, spec: str, expected: bool | None) -> None:
    assert versions.version_satisfies(version, spec) is expected


@pytest.mark.parametrize(
    ("older", "newer"),
    [("2.6.0.dev20241112", "2.6.0"), ("2.6.0a0+git1", "2.6.0"), ("2.6.0rc1", "2.6.0"), ("2.6.0", "2.6.0.post1"),
     ("2.6.0", "2.6.0+cu126"), ("2.6.0.dev20241112", "2.6.0.dev20241113"), ("12.4.99", "12.4.131"),
     ("9.0.176", "10.0.130"), ("2.9.1", "2.10.0")],
)
def test_order(older: str, newer: str) -> None:
    assert versions.parse_version(older) < versions.parse_version(newer)  # type: ignore[operator]
    assert truth(f"ver('{older}') < ver('{newer}')", {}) is True


@pytest.mark.parametrize("text", [None, True, 3, 12.4, "", "abc", "v", "+cu126", "..", "1..2", "\x00", "9" * 400,
                                  "9" * 5000, "1." * 3000, "1.0" + "a" * 100000, "1.2.3-", "2.6.0.dev",
                                  "2.6.0.devABC", "1.0+", "١٢٣"])
def test_never_raises(text: object) -> None:
    versions.parse_version(text)
    versions.major_minor(text)


def test_major_minor_of_nightlies_and_locals() -> None:
    assert versions.major_minor("2.6.0.dev20241112+cu124") == (2, 6)
    assert versions.major_minor("2.11.0a0+git1234") == (2, 11)
    assert versions.major_minor("V13.0.88") == (13, 0)
    assert versions.major_minor("nothing") is None


def test_rule_functions_keep_the_order() -> None:
    assert truth("satisfies(torch.version, '>=2.6')", {"torch.version": "2.6.0.dev20241112"}) is False
    assert truth("ver(torch.version) >= ver('2.6')", {"torch.version": "2.6.0.dev20241112"}) is False
    assert truth("satisfies(torch.version, '>=2.6')", {"torch.version": "garbage"}) is None  # unknown, quiet


def test_a_real_release_history_sorts_in_pep440_order() -> None:
    # torch strings as pip, nightlies and source builds print them, in their true order
    ordered = ["2.5.1+cpu", "2.6.0.dev20241001", "2.6.0.dev20241112+cu124", "2.6.0a0+git1234abc", "2.6.0rc1",
               "2.6.0rc2", "2.6.0", "2.6.0+cu126", "2.6.0.post1", "2.7.0.dev20250101", "2.7.0", "2.10.0",
               "2.11.0+cu130"]
    parsed = [versions.parse_version(v) for v in ordered]
    assert None not in parsed
    assert sorted(ordered, key=lambda v: versions.parse_version(v)) == ordered  # type: ignore[arg-type,return-value]
    for text, version in zip(ordered, parsed, strict=True):  # valid PEP 440 strings round-trip unchanged
        assert str(version) == text


def test_version_key_sorts_unreadable_first() -> None:
    assert max(["3.4.9", "3.4.33", "3.4.30"], key=versions.version_key) == "3.4.33"  # not string order
    assert sorted(["junk", "1.0", "0.9"], key=versions.version_key) == ["junk", "0.9", "1.0"]
