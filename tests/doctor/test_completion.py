"""Shell completion for both CLIs: typer's --show-completion script, and the completions it asks for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import shells

ENTRIES = {"olmo": "from olmo_doctor.olmo_clash import olmo_main as main",
           "olmo-doctor": "from olmo_doctor.cli import main"}


def _run(prog: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.argv[0] = {prog!r}; {ENTRIES[prog]}; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


@pytest.mark.parametrize(("prog", "words", "want"), [
    ("olmo", "olmo expo", "export-hf"),
    ("olmo", "olmo train --skip", "--skip-doctor"),
    ("olmo-doctor", "olmo-doctor chec", "check"),
])
def test_completion_answers(prog: str, words: str, want: str) -> None:
    var = f"_{prog.replace('-', '_').upper()}_COMPLETE"
    proc = _run(prog, {var: "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)})
    assert proc.returncode == 0 and proc.stdout.split() == [want], proc.stdout + proc.stderr


# typer names the shell the command runs under (its nearest shell ancestor), whatever started the tests
SCRIPT_OF = {"bash": ('"$@"; exit $?', "_{fn}_completion()", "complete "),
             "zsh": ('"$@"; exit $?', "#compdef {prog}", "_{fn}_completion()"),
             "fish": ("$argv; exit $status", "complete --command {prog}", "_{env}_COMPLETE=complete_fish")}


@pytest.mark.parametrize("shell", sorted(SCRIPT_OF))
@pytest.mark.parametrize("prog", ["olmo", "olmo-doctor"])
def test_show_completion_prints_the_script_of_the_shell_it_runs_in(prog: str, shell: str) -> None:
    runner, *wants = SCRIPT_OF[shell]
    code = f"import sys; sys.argv[0] = {prog!r}; {ENTRIES[prog]}; main()"
    argv = [shells.path_of(shell), *(["--no-config"] if shell == "fish" else []), "-c", runner,
            *([] if shell == "fish" else ["_"]), sys.executable, "-c", code, "--show-completion"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    names = {"prog": prog, "fn": prog.replace("-", "_"), "env": prog.replace("-", "_").upper()}
    assert all(want.format(**names) in proc.stdout for want in wants), proc.stdout[:300]
