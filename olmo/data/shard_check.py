"""Token shards checked before the first training step, at a cost that depends on the data, never on the run.

For every shard: the file is there and has exactly the size its metadata (or its dtype) implies, and one
vectorised pass finds its largest token id and, where prepare-data recorded one, its sha256. An id the model's
embedding cannot hold would otherwise surface as `IndexError: index out of range` hundreds of steps in, and
changed bytes would train silently. A pass over 1 GB takes well under a second; its result is cached under
the user's cache folder, so a second start reads 12 KiB per shard instead of all of it. Only the rank that
checks (rank 0 under torchrun) scans.

The cache key is what makes a cached "fine" trustworthy, so it holds what an edit cannot keep: the file's
device, inode, size, mtime and ctime, its recorded checksum, and a sha256 of three 4 KiB samples of its bytes
(start, middle, end). mtime can be set back with `touch -d`, but ctime is set by the kernel on every write,
chmod or utime and cannot be set back without changing the system clock, so a shard edited in place with its
mtime restored is scanned again; the samples catch a rewrite on filesystems that do not keep a real ctime (some
FUSE mounts report ctime = mtime) wherever it touches them. It costs one stat and three 4 KiB reads per shard
(12 MB for 1,000 shards), against the full pass it saves; hashing every byte on every start would be that pass.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from olmo import progress
from olmo.cache import cache_root
from olmo.errors import ConfigError
from olmo.hints import command
from olmo.progress import Phases
from olmo_common.bounded.data import load_json
from olmo_common.bounded.files import open_regular

SCAN_TOKENS = 1 << 24  # tokens per vectorised step: bounded memory for any shard size
CACHE_ENTRIES = 20_000
NOTE_BYTES = 2 * 10**9  # announce a first scan larger than this (a few seconds)
_memo: dict[str, dict[str, Any]] = {}  # this process's scans: a second run in one process (tests, smoke) skips them


@dataclass
class ShardToCheck:
    path: Path
    dtype: str
    num_tokens: int | None  # from metadata; None for a shard without any
    sha256: str | None = None  # recorded by prepare-data
    max_id: int | None = None  # recorded by prepare-data


def cache_path() -> Path:
    return cache_root("olmo") / "shard-scans.json"


SAMPLE_BYTES = 4096


def _identity(path: Path) -> tuple[os.stat_result, str]:
    """(stat, sha256 of three SAMPLE_BYTES pieces: start, middle, end) of a shard, from one open of a regular
    file (a FIFO given as a shard is refused, never waited on)."""
    with open_regular(path) as f:
        st = os.fstat(f.fileno())
        h = hashlib.sha256()
        for at in sorted({0, max(0, st.st_size // 2 - SAMPLE_BYTES // 2), max(0, st.st_size - SAMPLE_BYTES)}):
            h.update(os.pread(f.fileno(), SAMPLE_BYTES, at))
    return st, h.hexdigest()


def _cache_key(shard: ShardToCheck, st: os.stat_result, sample: str) -> str:
    return (f"{os.path.realpath(shard.path)}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
            f"{st.st_ctime_ns}|{shard.dtype}|{shard.sha256}|{sample}")


def scan(path: Path, dtype: str, want_sha: bool) -> dict[str, Any]:
    """{max_id, sha256 (or None), odd_zero}: one pass, a chunk of SCAN_TOKENS at a time. `odd_zero`: every
    second uint16 is 0, the sign of uint32 data read as uint16."""
    itemsize = np.dtype(dtype).itemsize
    n = path.stat().st_size // itemsize
    sha = hashlib.sha256() if want_sha else None
    top, odd_any = -1, False
    if n:
        arr = np.memmap(path, dtype=dtype, mode="r", shape=(n,))
        for start in range(0, n, SCAN_TOKENS):
            chunk = arr[start:start + SCAN_TOKENS]
            top = max(top, int(chunk.max()))
            if dtype == "uint16" and not odd_any:
                odd_any = bool(chunk[(start + 1) % 2::2].any())
            if sha is not None:
                sha.update(chunk.data.cast("B"))  # no copy: a contiguous slice of the map
        del arr
    return {"max_id": top, "sha256": sha.hexdigest() if sha else None, "odd_zero": dtype == "uint16" and not odd_any}


def first_id_at_least(path: Path, dtype: str, limit: int) -> int:
    """Offset of the first token >= limit (called only once one is known to be there)."""
    n = path.stat().st_size // np.dtype(dtype).itemsize
    arr = np.memmap(path, dtype=dtype, mode="r", shape=(n,))
    for start in range(0, n, SCAN_TOKENS):
        hit = np.flatnonzero(arr[start:start + SCAN_TOKENS] >= limit)
        if hit.size:
            return start + int(hit[0])
    return -1


def _load_cache() -> dict[str, Any]:
    try:
        data = load_json(cache_path(), "cache entry")
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_cache(entries: dict[str, Any]) -> None:
    """Best effort: a read-only home only means the next start scans again."""
    from olmo.fsutil import atomic_write_json

    path = cache_path()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        old = _load_cache()
        old.update(entries)
        keep = dict(list(old.items())[-CACHE_ENTRIES:])
        atomic_write_json(path, keep)


def _valid(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("max_id"), int) and isinstance(entry.get("odd_zero"), bool)


def check(shards: list[ShardToCheck], vocab_limit: int, where: str, scan_data: bool = True,
          say: Callable[[str], object] | None = None, phases: Phases = progress.silent) -> None:
    """ConfigError (one line: file and problem) for the first shard that is missing, has the wrong size,
    holds a token id >= `vocab_limit`, or whose bytes differ from the checksum its metadata records.
    `say` hears one line before a scan long enough to look like a hang; `phases` shows the scan by bytes."""
    identities = [_identity_checked(s, vocab_limit, where) for s in shards]
    if scan_data:
        _check_contents(shards, identities, vocab_limit, where, say, phases)


def _check_contents(shards: list[ShardToCheck], identities: list[tuple[os.stat_result, str]], vocab_limit: int,
                    where: str, say: Callable[[str], object] | None, phases: Phases) -> None:
    """Check each shard's scan: from this process's memo or the cache when its identity is unchanged, else made
    now (and cached when it matches the recorded checksum)."""
    cache = _load_cache()
    keys = [_cache_key(s, st, sample) for s, (st, sample) in zip(shards, identities, strict=True)]
    todo = _scan_unknown(shards, [st.st_size for st, _ in identities], keys, cache, say, phases)
    for s, k in zip(shards, keys, strict=True):
        _check_scanned(s, _memo.get(k) or cache[k], vocab_limit, where)
    _save_matching([shards[i] for i in todo], [keys[i] for i in todo])


def _scan_unknown(shards: list[ShardToCheck], sizes: list[int], keys: list[str], cache: dict[str, Any],
                  say: Callable[[str], object] | None, phases: Phases) -> list[int]:
    """The indices of the shards with no valid scan in this process's memo or the cache, scanned now into the
    memo."""
    todo = [i for i, k in enumerate(keys) if not _valid(_memo.get(k) or cache.get(k))]
    if todo:
        found = _scan_all([shards[i] for i in todo], [sizes[i] for i in todo], say, phases)
        _memo.update({keys[i]: res for i, res in zip(todo, found, strict=True)})
    return todo


def _save_matching(scanned: list[ShardToCheck], keys: list[str]) -> None:
    """Cache the new scans, except those of shards whose bytes differ from their recorded checksum."""
    fresh = {k: _memo[k] for s, k in zip(scanned, keys, strict=True)
             if s.sha256 is None or _memo[k].get("sha256") == s.sha256}
    if fresh:
        _save_cache(fresh)


def _identity_checked(shard: ShardToCheck, vocab_limit: int, where: str) -> tuple[os.stat_result, str]:
    """`_identity` of a shard whose size agrees with its metadata and dtype, and whose recorded largest id (if
    any) fits the vocabulary; ConfigError otherwise."""
    try:
        st, sample = _identity(shard.path)
    except OSError as e:
        raise ConfigError(f"shard {shard.path} cannot be read ({e.strerror}); rerun `olmo prepare-data` or fix "
                          "data.paths") from None
    itemsize = np.dtype(shard.dtype).itemsize
    if shard.num_tokens is not None and st.st_size != shard.num_tokens * itemsize:
        raise ConfigError(f"shard {shard.path} has {st.st_size:,} bytes but its metadata says {shard.num_tokens:,} "
                          f"{shard.dtype} tokens ({shard.num_tokens * itemsize:,} bytes): truncated or replaced; "
                          "`olmo validate-shards` locates it, rerun `olmo prepare-data` to rewrite it")
    if st.st_size % itemsize:
        raise ConfigError(f"shard {shard.path} has {st.st_size:,} bytes, not a whole number of {shard.dtype} tokens: "
                          "truncated, or data.dtype is wrong")
    if shard.max_id is not None and shard.max_id >= vocab_limit:
        raise ConfigError(f"shard {shard.path} holds token id {shard.max_id:,} (its metadata says) but the vocabulary "
                          f"has {vocab_limit:,} ids; {where}")
    return st, sample


def _scan_all(shards: list[ShardToCheck], sizes: list[int], say: Callable[[str], object] | None,
              phases: Phases) -> list[dict[str, Any]]:
    """`scan` of each shard, a few at a time (hashing and numpy release the GIL), in order."""
    size = sum(sizes)
    if say and size > NOTE_BYTES:
        say(f"checking {size / 1e9:,.1f} GB of token shards (sizes, checksums, largest id); the result is "
            "cached, so this happens once")
    workers = min(len(shards), 4, os.cpu_count() or 1)
    with phases("checking shards", size) as advance, ThreadPoolExecutor(workers) as pool:
        def scan_one(i: int) -> dict[str, Any]:
            found = scan(shards[i].path, shards[i].dtype, shards[i].sha256 is not None)
            advance(sizes[i])
            return found

        return list(pool.map(scan_one, range(len(shards))))


def _check_scanned(shard: ShardToCheck, res: dict[str, Any], vocab_limit: int, where: str) -> None:
    """ConfigError when a shard's scan contradicts its recorded checksum, finds an id past the vocabulary, or
    shows uint32 data read as uint16."""
    if shard.sha256 is not None and res.get("sha256") not in (None, shard.sha256):
        raise ConfigError(f"shard {shard.path} does not match the sha256 its metadata records: its bytes changed; "
                          f"`{command('olmo', 'validate-shards', shard.path.parent)}` locates the damage")
    if res["max_id"] >= vocab_limit:
        at = first_id_at_least(shard.path, shard.dtype, vocab_limit)
        raise ConfigError(f"shard {shard.path} holds token id {res['max_id']:,} (first out-of-range id at token "
                          f"{at:,}) but the vocabulary has {vocab_limit:,} ids; {where}")
    if shard.num_tokens is None and res["odd_zero"] and shard.path.stat().st_size >= 256:
        raise ConfigError(f"shard {shard.path} read as uint16 has 0 in every second token: it looks like uint32 "
                          "data; set data.dtype=uint32")
