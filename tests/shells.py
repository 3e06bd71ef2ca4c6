"""The shells a test runs what olmo-doctor prints in: bash, zsh and dash (POSIX sh: `env` in the bash format,
`.olmo-doctor/env.sh`, the fix commands `check` prints, `set -a; . ./.env`) and fish (`env --format fish`, and
the fix commands, which are quoted so that fish reads each value as the same literal word).

Every one must be installed: `.ci/run` installs them (apt-get install -y zsh fish dash), so a missing shell fails
the test with that hint instead of letting it pass with nothing run. Each runs without start-up files, with PATH
set to an empty folder unless a test gives another: only builtins could run an injected command, so a marker file
written by `echo pwned > marker` is the proof.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

POSIX = ("bash", "zsh", "dash")
ALL = (*POSIX, "fish")
# how each runs a script given as an argument without reading any start-up file; `$1` (fish: $argv[1]) is `arg`
_ARGV = {"bash": ["--noprofile", "--norc", "-c"], "zsh": ["-f", "-c"], "dash": ["-c"], "fish": ["--no-config", "-c"]}


def path_of(shell: str) -> str:
    found = shutil.which(shell)
    if found is None:
        pytest.fail(f"{shell} is not installed; the shell tests run in {', '.join(ALL)} "
                    "(.ci/run installs them: apt-get install -y zsh fish dash)", pytrace=False)
    return found


def run(shell: str, script: str, cwd: Path, arg: str | None = None, path: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run `script` in `shell` from `cwd` with HOME=cwd; `arg` becomes $1 (fish: $argv[1])."""
    empty = cwd / "empty-path"
    empty.mkdir(exist_ok=True)
    argv = [path_of(shell), *_ARGV[shell], script]
    if arg is not None:
        argv += [arg] if shell == "fish" else ["_", arg]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=30,
                          env={"PATH": path or str(empty), "HOME": str(cwd)})
