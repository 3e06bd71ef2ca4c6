"""The shard-scan cache cannot be fooled by restoring a shard's mtime after editing it in place.

The attack: train once (the scan of each shard is cached), write an out-of-range token id into a shard without
changing its size, set its mtime back (`touch -d`), start again. With a key of path, size, mtime and inode the
cached "largest id is fine" was trusted and the run died in an IndexError; the key now holds the ctime (which the
kernel sets on every write and utime, and no user can set back) and a digest of three samples of the bytes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from olmo.config import ConfigError
from olmo.data import shard_check as S

VOCAB = 1000


def _shard(path: Path, n: int = 300_000) -> np.ndarray:
    tokens = (np.arange(n, dtype=np.uint16) % 500).astype(np.uint16)
    tokens.tofile(path)
    return tokens


def _edit_in_place_keeping_mtime(path: Path, offset_tokens: int, value: int) -> None:
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset_tokens * 2)
        f.write(np.array([value], dtype=np.uint16).tobytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # `touch -d`: the mtime the cache saw
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    S._memo.clear()


@pytest.mark.parametrize("recorded_sha", [False, True], ids=["plain-npy", "with-manifest-sha256"])
@pytest.mark.parametrize("at", [0, 3_333, 150_000, 299_999], ids=["start", "unsampled", "middle", "end"])
def test_an_edit_with_the_mtime_restored_is_scanned_again(tmp_path: Path, recorded_sha: bool, at: int) -> None:
    shard = tmp_path / "part-00000.npy"
    tokens = _shard(shard)
    sha = hashlib.sha256(tokens.tobytes()).hexdigest() if recorded_sha else None
    todo = [S.ShardToCheck(shard, "uint16", len(tokens), sha256=sha)]
    S.check(todo, VOCAB, "fix it")  # scanned, then cached
    assert S.cache_path().is_file()
    S._memo.clear()  # a new process: only the cache file is left
    _edit_in_place_keeping_mtime(shard, at, 60_000)
    with pytest.raises(ConfigError, match=r"holds token id 60,000|does not match the sha256"):
        S.check(todo, VOCAB, "fix it")


def test_an_unchanged_shard_is_not_scanned_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shard = tmp_path / "part-00000.npy"
    tokens = _shard(shard)
    todo = [S.ShardToCheck(shard, "uint16", len(tokens))]
    S.check(todo, VOCAB, "fix it")
    S._memo.clear()

    def no_scan(*args: object) -> None:
        raise AssertionError("scanned again")

    monkeypatch.setattr(S, "scan", no_scan)
    S.check(todo, VOCAB, "fix it")  # the cache holds: the key is stable for an untouched file


def test_the_samples_see_an_edit_the_stat_cannot(tmp_path: Path) -> None:
    """Where ctime is not kept (some FUSE mounts report ctime = mtime), an edit at a sampled place still changes
    the key: its three samples are the start, the middle and the end of the shard."""
    shard = tmp_path / "part-00000.npy"
    tokens = _shard(shard)
    before = S._identity(shard)[1]
    for at in (0, len(tokens) // 2, len(tokens) - 1):
        _edit_in_place_keeping_mtime(shard, at, 60_000)
        after = S._identity(shard)[1]
        assert after != before
        before = after


def test_a_fifo_given_as_a_shard_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "part-00000.npy"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO"):
        S.check([S.ShardToCheck(fifo, "uint16", None)], VOCAB, "fix it")
