"""Shell completion for both CLIs: typer's --show-completion script, and the completions it asks for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("prog", ["olmo", "olmo-doctor"])
def test_show_completion_prints_a_script(prog: str) -> None:
    proc = _run(prog, {"SHELL": "/bin/bash"}, "--show-completion", "bash")
    assert proc.returncode == 0, proc.stderr
    assert f"_{prog.replace('-', '_')}_completion()" in proc.stdout and "complete " in proc.stdout
