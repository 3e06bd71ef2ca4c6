"""The search paths that decide which program or module runs: PATH entries olmo-doctor ignores because they
name the working folder (an empty entry, '.', a relative one), and what PYTHONPATH adds to the import path of
the Python subprocesses the probes start (olmo_doctor/isolation.py)."""

from __future__ import annotations

from olmo_doctor.facts import Facts
from olmo_doctor.isolation import ignored_path_entries, ignored_pythonpath_entries, user_pythonpath


def _shown(entries: list[str]) -> list[str]:
    return [e if e else "(empty)" for e in entries]  # '' is a leading, trailing or doubled ':'


def probe() -> Facts:
    return {
        "path.ignored_entries": _shown(ignored_path_entries()),
        "python.pythonpath": user_pythonpath(),
        "python.pythonpath_ignored": _shown(ignored_pythonpath_entries()),
    }
