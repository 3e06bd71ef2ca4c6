"""Measure a piece of work in a fresh child process: its CPU time and peak memory, never wall-clock time.

    got = child_run(["olmo-doctor", "diagnose", path])   # {"rc", "cpu", "rss_mb", "out", "err"} of that command
    got = child_python(CODE, arg1, ...)                  # the same for `python -c CODE args`; CODE prints JSON last

Tests compare the CPU time of a hostile input with an anchor measured the same way in the same test (a benign
input of the same size), with generous margins, so a loaded or slow machine cannot fail them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter whose only child is the measured process, so RUSAGE_CHILDREN is that process alone.
_WRAP = textwrap.dedent("""
    import json, resource, subprocess, sys
    out = subprocess.run(sys.argv[1:], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"rc": out.returncode, "cpu": use.ru_utime + use.ru_stime, "rss_mb": use.ru_maxrss / 1024,
                      "out": out.stdout[-20000:], "err": out.stderr[-4000:]}))
""")


_COMMANDS = {"olmo-doctor": [sys.executable, "-m", "olmo_doctor"],
             "olmo": [sys.executable, "-c", "from olmo_doctor.olmo_clash import olmo_main; olmo_main()"]}


def child_run(argv: list[str], cwd: Path | None = None) -> dict[str, Any]:
    """Run `argv` (a module's command line: ["olmo-doctor", ...] or ["olmo", ...] run with this Python) in a
    measured child: its exit code, CPU seconds, peak RSS in MB and output."""
    argv = [*_COMMANDS[argv[0]], *argv[1:]] if argv[0] in _COMMANDS else argv
    res = subprocess.run([sys.executable, "-c", _WRAP, *argv], capture_output=True, text=True, cwd=cwd or ROOT,
                         timeout=900)
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def child_python(code: str, *args: str, cwd: Path | None = None) -> dict[str, Any]:
    """Run `python -c code args` in a measured child; the JSON object its last output line prints is merged in
    under "result"."""
    got = child_run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd)
    lines = got["out"].strip().splitlines()
    got["result"] = json.loads(lines[-1]) if got["rc"] == 0 and lines else None
    return got
