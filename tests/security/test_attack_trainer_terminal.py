"""Attacks on what `olmo` prints: a file name in a cloned dataset folder, a shard name in a prepared folder's
manifest.json and a path the user was handed are data for the terminal too. A control sequence in them (ESC [2J
clears the screen, ESC [1A ESC [2K moves up and erases a real warning, OSC 52 writes the clipboard) must never
reach the terminal, and rich markup in them must print as written (found by a red-team pass over `olmo
validate-shards` and `olmo prepare-data`; olmo-doctor's side is test_security_output.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
from olmo.data.prepare import find_inputs, load_tokenizer, prepare
from olmo.terminal import inert, plain

# what a terminal acts on: CSI, a lone ESC, OSC 52 with BEL, the 8-bit CSI, CR, backspace, a bidi override
TERMINAL = ["\x1b[2J\x1b[1;32m", "\x1b[1A\x1b[2K", "\x1b]52;c;aGk=\x07", "\u009b2J", "\r", "\x08", "\u202e"]
CLI = Callable[..., tuple[int, str]]


@pytest.mark.parametrize("seq", TERMINAL)
def test_inert_and_plain_leave_no_control_character(seq: str) -> None:
    for text in (inert(f"a{seq}b"), plain(f"a{seq}b")):
        assert text.startswith("a") and text.endswith("b")
        assert all(c.isprintable() for c in text), repr(text)
    assert inert("[/bold] x[link=file:///etc]") == "\\[/bold] x\\[link=file:///etc]"  # markup escaped, not eaten


def _no_control(text: str) -> None:
    assert "\x1b" not in text and "\u009b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)


@pytest.mark.parametrize("seq", ["\x1b[2J\x1b[1A\x1b[2K", "\x1b]52;c;aGk=\x07"])
def test_a_file_name_in_a_dataset_folder_reaches_no_terminal(tmp_path: Path, olmo_cli: CLI, seq: str) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / f"{seq}x.jsonl").write_text('{"text": "hello there"}\n{bad json\n')
    for args in (["--dry-run"], []):
        code, err = olmo_cli("prepare-data", "-i", str(inputs), "-o", str(tmp_path / "out"), "-t",
                             str(TOKENIZER_PATH), *args)
        assert code in (0, 1) and "Traceback" not in err, err  # 1: the dry run flags the bad line
        _no_control(err + olmo_cli.out)  # type: ignore[attr-defined]
        assert "x.jsonl" in err + olmo_cli.out  # type: ignore[attr-defined]  # still named, its controls as "?"


def test_a_shard_name_in_a_manifest_reaches_no_terminal(tmp_path: Path, olmo_cli: CLI) -> None:
    data = tmp_path / "data"
    prepare(find_inputs([CORPUS_PATH]), data, load_tokenizer(TOKENIZER_PATH), shard_tokens=40_000)
    manifest = json.loads((data / "manifest.json").read_text())
    first = manifest["shards"][0]["file"]
    hostile = "\x1b[2J\x1b[1;32mok.npy"
    shutil.move(data / first, data / hostile)
    manifest["shards"][0]["file"] = hostile
    (data / "manifest.json").write_text(json.dumps(manifest))
    code, err = olmo_cli("validate-shards", str(data))
    assert code in (0, 2) and "Traceback" not in err, err
    _no_control(err + olmo_cli.out)  # type: ignore[attr-defined]
    assert "ok.npy" in err + olmo_cli.out  # type: ignore[attr-defined]
