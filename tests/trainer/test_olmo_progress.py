"""Progress is counted by work finished: prepare-data's bytes reach 100% only with the last tokens written."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
from olmo.data.prepare import find_inputs, load_tokenizer, prepare


def _inputs(tmp: Path) -> list[Path]:
    """The bundled corpus four times over, as .jsonl.gz and .jsonl, so there are many tasks to read ahead."""
    lines = gzip.decompress(CORPUS_PATH.read_bytes())
    (tmp / "in").mkdir()
    for i in range(2):
        (tmp / "in" / f"a{i}.jsonl.gz").write_bytes(gzip.compress(lines))
        (tmp / "in" / f"b{i}.jsonl").write_bytes(lines)
    return find_inputs([tmp / "in"])


@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "worker-pool"])
def test_bytes_reach_the_total_only_with_the_last_tokens(workers: int, tmp_path: Path) -> None:
    files = _inputs(tmp_path)
    calls: list[tuple[int, int]] = []
    res = prepare(files, tmp_path / "out", load_tokenizer(TOKENIZER_PATH), 1 << 20,
                  progress=lambda b, t: calls.append((b, t)), workers=workers)
    total_bytes = sum(f.stat().st_size for f in files)
    total_tokens = sum(s.num_tokens for s in res.shards)
    assert sum(b for b, _ in calls) == total_bytes and sum(t for _, t in calls) == total_tokens
    done_b = done_t = 0
    for b, t in calls:
        done_b, done_t = done_b + b, done_t + t
        # never ahead of the tokens by more than one task's worth of input (64 KiB) plus a gzip trailer
        assert done_b / total_bytes <= done_t / total_tokens + (64 << 10) / total_bytes + 1e-3
        if done_b == total_bytes:
            assert done_t == total_tokens  # 100% of the bytes only once everything is written
            break


def test_no_bar_frames_in_a_pipe(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    code, out, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "d"), "-t", "bundled")
    assert code == 0 and "tokenizing" not in out + err and "\x1b[" not in out + err
    code, out, err = cli("validate-shards", str(tmp_path / "d"))
    assert code == 0 and "verifying" not in out + err
