"""prepare-data's speed measures change when bytes reach the disk and how input is cut into tasks, never the
output: shards flushed in the background (olmo/data/write_behind.py) and the last tasks cut smaller are
byte-identical to the plain path, and a background flush that hits a full disk fails like a write does."""

from __future__ import annotations

import errno
import gzip
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.data import prepare_pipeline as pipe
from olmo.data import write_behind
from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH
from olmo.data.prepare import load_tokenizer, prepare

CLI = Callable[..., tuple[int, str, str]]


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _plain_corpus(tmp: Path) -> Path:
    path = tmp / "corpus.jsonl"
    path.write_bytes(gzip.decompress(CORPUS_PATH.read_bytes()))
    return path


def test_background_flushes_and_small_last_tasks_leave_the_output_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _plain_corpus(tmp_path)
    tok = load_tokenizer(TOKENIZER_PATH)
    ref = prepare([corpus], tmp_path / "ref", tok, shard_tokens=20_000, workers=1)  # in-process, no flushes
    flushed: list[int] = []
    real_sync = os.fdatasync

    def counting_sync(fd: int) -> None:
        flushed.append(fd)
        real_sync(fd)

    monkeypatch.setattr(os, "fdatasync", counting_sync)
    monkeypatch.setattr(write_behind, "SYNC_BYTES", 4096)
    monkeypatch.setattr(pipe, "MIN_POOL_BYTES", 0)
    monkeypatch.setattr(pipe, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(pipe, "CHUNK_MIN", 1024)
    monkeypatch.setattr(pipe, "CHUNK_MAX", 8192)  # 8 KiB tasks, the last 3 x 8 KiB of input in 2 KiB ones
    sizes: list[int] = []
    real_read = pipe.read_tasks

    def recording_read(*args: object, **kwargs: object) -> object:
        for task in real_read(*args, **kwargs):  # type: ignore[arg-type]
            sizes.append(len(task.data))
            yield task

    monkeypatch.setattr(pipe, "read_tasks", recording_read)
    three = prepare([corpus], tmp_path / "w3", tok, shard_tokens=20_000, workers=3)
    assert three.workers == 3 and len(ref.shards) > 3
    assert _files(tmp_path / "w3") == _files(tmp_path / "ref")  # shards, sidecars, manifest, checksums
    assert len(flushed) >= 2  # the shards really were flushed in the background as they grew
    assert min(sizes[:10]) > 6144 and max(sizes[-6:]) < 4096  # the end really came in smaller tasks
    assert not [t for t in threading.enumerate() if t.name == "olmo-write-behind"]  # every flusher ended


def test_read_tasks_with_a_tail_cover_every_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipe, "CHUNK_MIN", 512)
    text = _plain_corpus(tmp_path).read_bytes()
    plain, packed = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    rest: list[int] = []  # input bytes no task carries (a gzip trailer)
    tasks = list(pipe.read_tasks([plain, packed], (0, 0), 8192, rest.append, tail=packed.stat().st_size + 20_000))
    by_file = [[t for t in tasks if t.file == i] for i in (0, 1)]
    for group in by_file:
        assert b"".join(t.data for t in group) == text  # nothing lost, nothing twice, lines whole
        assert all(t.data.endswith(b"\n") for t in group)
    assert min(len(t.data) for t in by_file[0][:5]) > 6144  # before the tail: full-size tasks (whole lines)
    small = [t for t in tasks if len(t.data) < 4096]
    assert small and small[0].file == 0 and all(len(t.data) < 4096 for t in by_file[1][:-1])
    assert sum(t.nbytes for t in tasks) + sum(rest) == plain.stat().st_size + packed.stat().st_size  # progress


def test_a_background_flush_on_a_full_disk_is_a_full_disk_error(tmp_path: Path, cli: CLI,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("-i", str(CORPUS_PATH), "-t", "bundled", "--shard-size", "60K", "--workers", "1", "-q")
    code, _, err = cli("prepare-data", *args, "-o", str(tmp_path / "ref"))
    assert code == 0, err
    calls = [0]

    def full_sync(fd: int) -> None:
        calls[0] += 1
        if calls[0] >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full_sync)
    monkeypatch.setattr(write_behind, "SYNC_BYTES", 16 << 10)
    out = tmp_path / "out"
    code, _, err = cli("prepare-data", *args, "-o", str(out))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("olmo: no space left on /"), err
    assert calls[0] >= 3 and not list(out.glob(".*tmp*"))  # the shard being written is gone
    kept = sorted(p.name for p in out.glob("part-*.npy"))
    assert all((out / n).read_bytes() == (tmp_path / "ref" / n).read_bytes() for n in kept)
    monkeypatch.undo()
    code, _, err = cli("prepare-data", *args, "-o", str(out))
    assert code == 0, err
    assert _files(out) == _files(tmp_path / "ref")  # resumed after the kept shards: the same output

