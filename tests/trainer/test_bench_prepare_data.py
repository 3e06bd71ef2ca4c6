"""bench/prepare_data.py's --gb mode: the generated corpus is seeded (the same bytes for any worker count),
web-like (JSON lines of prose of spread-out lengths), the 100K-vocab run writes uint32 shards, prints one
summary line and leaves no temp files; bad options are one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def gen(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.syspath_prepend(str(BENCH))  # spawned generator processes inherit sys.path
    import prepare_corpus

    return prepare_corpus


@pytest.mark.slow
def test_generated_corpus_is_seeded_and_web_like(tmp_path: Path, gen: object,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gen, "FILE_BYTES", 150_000)  # several files from a small corpus
    files, docs, chars = gen.generate(tmp_path, 400_000, 7, 2, False)  # type: ignore[attr-defined]
    assert len(files) == 3 and chars >= 400_000
    per_file = -(-400_000 // 3)
    for i, f in enumerate(files):  # the same bytes written here, in one process: the worker count does not matter
        again = tmp_path / "again" / f.name
        again.parent.mkdir(exist_ok=True)
        gen._write_file((again, i, per_file, 7, False))  # type: ignore[attr-defined]
        assert again.read_bytes() == f.read_bytes()
    texts = [json.loads(line)["text"] for f in files for line in f.read_text().splitlines()]
    assert len(texts) == docs and sum(map(len, texts)) == chars
    lengths = sorted(map(len, texts))
    assert lengths[0] >= gen.DOC_MIN and lengths[-1] <= gen.DOC_MAX + 2_000  # type: ignore[attr-defined]
    assert lengths[-1] > 4 * lengths[len(lengths) // 2]  # a long tail, not one size
    words = " ".join(texts).split()
    assert len(set(words)) > len(words) // 20  # a large vocabulary, not a few phrases repeated
    assert texts[0] != json.loads(files[1].read_text().splitlines()[0])["text"]  # each file its own documents


@pytest.mark.slow
def test_bench_gb_mode_writes_uint32_shards_and_cleans_up(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(BENCH / "prepare_data.py"), "--gb", "0.002", "--workers", "2",
                           "--min-ratio", "0"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = [line for line in proc.stdout.splitlines() if line.startswith("SUMMARY")]
    assert len(summary) == 1 and "vocab 100,278 -> uint32" in summary[0] and "ratio of medians of 3" in summary[0]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["dtype"] == "uint32" and result["vocab_size"] == 100_278 and result["repeats"] == 3
    assert result["text_gb"] >= 0.002 and result["tokens"] > 100_000 and result["prepare_fixed_s"] >= 0
    assert list(tmp_path.iterdir()) == []  # the corpus, tokenizer and shards went with the temp dir


@pytest.mark.parametrize("args", [["--gb", "0"], ["--gb", "-1"], ["--repeats", "0"], ["--deadline", "-5"]])
def test_bench_bad_options_are_one_line(args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "prepare_data.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []
