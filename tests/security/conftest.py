"""Fixtures for the attack tests: one real trained run with a checkpoint (built once per session) that each test
copies and poisons, and the `olmo` command run in-process (so a payload that ran would show in this process)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch
from _crafted import Victim, victim_config

from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
from olmo.data.prepare import find_inputs, load_tokenizer, prepare

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Victim:
    from olmo.train import train

    root = tmp_path_factory.mktemp("victim")
    data = root / "data"
    prepare(find_inputs([CORPUS_PATH]), data, load_tokenizer(TOKENIZER_PATH), shard_tokens=40_000)
    train(victim_config(data, root / "run", steps=2))
    assert (root / "run" / "checkpoints" / "step2" / ".metadata").is_file()
    return Victim(data, root / "run")


@pytest.fixture
def olmo_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """`olmo_cli("train", ...)` runs the real `olmo` entry point in this process: (exit code, stderr)."""
    import olmo.cli.common
    import olmo.cli.main

    for console in (olmo.cli.common.out, olmo.cli.common.err):
        monkeypatch.setattr(console, "_width", 400)  # no wrapping of long paths: the error must be one line

    def run(*args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["olmo", *args])
        try:
            olmo.cli.main.main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        run.out = captured.out  # type: ignore[attr-defined]  # the command's stdout, for a test that reads it
        return code, captured.err

    return run
