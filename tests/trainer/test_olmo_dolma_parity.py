"""Token parity with OLMo's data tooling: prepare-data gives every document the ids `dolma tokens` gives it.

The expected ids in tests/fixtures/dolma/expected.json were written by dolma 1.2.1's own `dolma tokens` (from PyPI)
over tests/fixtures/dolma/docs.jsonl, which holds the cases where the two could differ: surrounding whitespace of
every kind (dolma strips it with str.strip), blank and whitespace-only texts, texts that are or end with the
end-of-text token (no second EOS), BOS placement with a tokenizer that has one, a nested text field, Unicode
line separators inside strings, CRLF lines, and malformed lines (bad JSON, NaN, a lone surrogate escape, a
non-string or missing text, nesting too deep), which both skip. tests/fixtures/dolma/README.md says how to
regenerate it; the `network` test at the end does that against a fresh install of dolma.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from olmo.data import prepare_pipeline as pipe
from olmo.data.corpus import TOKENIZER_PATH
from olmo.data.prepare import InputOptions, LoadedTokenizer, load_tokenizer
from olmo.data.readers import ReadOptions
from olmo.data.shards import dtype_for_vocab
from olmo.data.tasks import Reading

CLI = Callable[..., tuple[int, str, str]]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dolma"
DOCS = FIXTURE / "docs.jsonl"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
CONFIGS = {  # the configurations make_fixture.py ran dolma with: tokenizer, text field, BOS token, EOS token
    "bundled": (TOKENIZER_PATH, "text", None, None),
    "bundled-meta-body": (TOKENIZER_PATH, "meta.body", None, None),
    "metaspace-bos-eos": (FIXTURE / "metaspace-tokenizer.json", "text", "<s>", "</s>"),
}


def _make_fixture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURE / "make_fixture.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ours(config: str, strip: bool = True) -> dict[str, list[int]]:
    """Each document's ids from prepare-data's own reader and encoder, keyed by line number like dolma's `loc`."""
    path, field, bos, eos = CONFIGS[config]
    tok = load_tokenizer(path, eos, bos)
    options = InputOptions(ReadOptions(tuple(field.split("."))), Reading(tuple(field.split(".")), strip))
    encoder = pipe.Encoder(tok.tokenizer, tok.eos_id, dtype_for_vocab(tok.vocab_size), options.reading, tok.bos_id)
    out: dict[str, list[int]] = {}
    for task in pipe.read_tasks([DOCS], (0, 0), 4096, options=options.read):  # small tasks: many boundaries
        r = encoder(task)
        ids = np.frombuffer(r.ids, dtype=dtype_for_vocab(tok.vocab_size))
        ends = np.frombuffer(r.ends, dtype=np.int64)
        for start, end, loc in zip([0, *ends[:-1]], ends, np.frombuffer(r.records, dtype=np.int64), strict=True):
            out[str(int(loc))] = ids[int(start):int(end)].tolist()
    return out


def test_the_fixture_is_what_make_fixture_writes() -> None:
    """The documents and tokenizers the expected ids were made from are the ones here (else regenerate them)."""
    assert DOCS.read_bytes().decode() == "\n".join(_make_fixture().documents()) + "\n"  # CRLF lines kept
    assert hashlib.sha256(DOCS.read_bytes()).hexdigest() == EXPECTED["docs_sha256"]
    for config, (path, *_) in CONFIGS.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == EXPECTED["tokenizers_sha256"][config], (
            f"{path} changed since the fixture was made: regenerate it (tests/fixtures/dolma/README.md)")


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_document_has_dolmas_ids(config: str) -> None:
    expected, ours = EXPECTED[config], _ours(config)
    assert ours.keys() == expected.keys()  # the same documents kept, the same skipped
    wrong = [loc for loc in expected if ours[loc] != expected[loc]]
    assert not wrong, f"{len(wrong)} of {len(expected)} documents differ from dolma's ids, first at line {wrong[0]}"
    assert len(expected) > 150


def test_the_fixture_really_exercises_whitespace_and_eos() -> None:
    """Without stripping (the old behaviour, --keep-whitespace) many documents differ: the fixture can fail."""
    raw, expected = _ours("bundled", strip=False), EXPECTED["bundled"]
    assert sum(raw.get(loc) != ids for loc, ids in expected.items()) > 80
    eos_only = [ids for ids in expected.values() if ids == [0]]  # "<|endoftext|>" alone: one EOS, not two
    assert len(eos_only) == 2 and all(ids.count(0) == 1 or ids[-2] != 0 for ids in expected.values())
    bos = EXPECTED["metaspace-bos-eos"]
    assert all(ids[0] == 1 and ids[-1] == 2 for ids in bos.values())  # BOS first and EOS last, never doubled
    assert not any(ids[:2] == [1, 1] or ids[-2:] == [2, 2] for ids in bos.values())


def test_prepare_data_shards_hold_dolmas_documents_in_order(tmp_path: Path, cli: CLI) -> None:
    code, _, err = cli("prepare-data", "-i", str(DOCS), "-o", str(tmp_path / "o"), "-t", "bundled", "-q",
                       "--shard-size", "2K", "--workers", "2")
    assert code == 0, err
    shards = sorted((tmp_path / "o").glob("part-*.npy"))
    assert len(shards) > 3
    got = np.concatenate([np.fromfile(s, dtype=np.uint16) for s in shards]).tolist()
    assert got == [t for loc in sorted(EXPECTED["bundled"], key=int) for t in EXPECTED["bundled"][loc]]
    assert "first: line 146, not JSON" in err  # the malformed lines are reported, with why


def test_keep_whitespace_tokenizes_texts_as_given(tmp_path: Path) -> None:
    tok: LoadedTokenizer = load_tokenizer(TOKENIZER_PATH)
    lines = DOCS.read_bytes().split(b"\n")
    raw = _ours("bundled", strip=False)
    for loc, ids in raw.items():
        want = tok.encode([json.loads(lines[int(loc) - 1])["text"]])[0]
        assert ids == (want if want[-1:] == [tok.eos_id] else [*want, tok.eos_id]), loc


@pytest.mark.network
@pytest.mark.slow
def test_regenerated_with_dolma_from_pypi_gives_the_same_ids(tmp_path: Path) -> None:
    """Install dolma into a scratch venv and run make_fixture.py with it: the ids it writes are the committed ones.
    dolma pins tokenizers <= 0.19.1, which cannot read the bundled tokenizer.json (its merges are pairs), so the
    tokenizers this project uses is put over it: the comparison is of dolma's pipeline, not of two tokenizer
    builds."""
    import tokenizers

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # the versions the fixture was made with: no resolver backtracking through boto3's hundreds of releases
    subprocess.run([*pip, "dolma==1.2.1", "-c", str(FIXTURE / "dolma-constraints.txt")], check=True, timeout=900)
    subprocess.run([*pip, "--no-deps", f"tokenizers=={tokenizers.__version__}"], check=True, timeout=300)
    out = tmp_path / "fixture"
    out.mkdir()
    (out / "metaspace-tokenizer.json").write_bytes((FIXTURE / "metaspace-tokenizer.json").read_bytes())
    subprocess.run([str(venv / "bin" / "python"), str(FIXTURE / "make_fixture.py"), "--out", str(out)], check=True,
                   timeout=600, capture_output=True)
    fresh = json.loads((out / "expected.json").read_text())
    for config in CONFIGS:
        assert fresh[config] == EXPECTED[config], config
