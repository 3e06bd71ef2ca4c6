"""Token shards checked before the first training step, at a cost that depends on the data, never on the run.

For every shard: the file is there and has exactly the size its metadata (or its dtype) implies, and one
vectorised pass finds its largest token id and, where prepare-data recorded one, its sha256. An id the model's
embedding cannot hold would otherwise surface as `IndexError: index out of range` hundreds of steps in, and
changed bytes would train silently. A pass over 1 GB takes well under a second; its result is cached under
the user's cache folder, keyed by the file's identity (path, size, mtime, inode) and its recorded checksum,
so a second start reads nothing. Only the rank that checks (rank 0 under torchrun) scans.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from olmo.cache import cache_root
from olmo.errors import ConfigError

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


def _key(shard: ShardToCheck, st: os.stat_result) -> str:
    return f"{os.path.realpath(shard.path)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{shard.dtype}|{shard.sha256}"


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
        data = json.loads(cache_path().read_bytes())
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
          say: Callable[[str], object] | None = None) -> None:
    """ConfigError (one line: file and problem) for the first shard that is missing, has the wrong size,
    holds a token id >= `vocab_limit`, or whose bytes differ from the checksum its metadata records.
    `say` hears one line before a scan long enough to look like a hang."""
    stats: list[os.stat_result] = []
    for s in shards:
        try:
            st = os.stat(s.path)
        except OSError as e:
            raise ConfigError(f"shard {s.path} cannot be read ({e.strerror}); rerun `olmo prepare-data` or fix "
                              "data.paths") from None
        itemsize = np.dtype(s.dtype).itemsize
        if s.num_tokens is not None and st.st_size != s.num_tokens * itemsize:
            raise ConfigError(f"shard {s.path} has {st.st_size:,} bytes but its metadata says {s.num_tokens:,} "
                              f"{s.dtype} tokens ({s.num_tokens * itemsize:,} bytes): truncated or replaced; "
                              "`olmo validate-shards` locates it, rerun `olmo prepare-data` to rewrite it")
        if st.st_size % itemsize:
            raise ConfigError(f"shard {s.path} has {st.st_size:,} bytes, not a whole number of {s.dtype} tokens: "
                              "truncated, or data.dtype is wrong")
        if s.max_id is not None and s.max_id >= vocab_limit:
            raise ConfigError(f"shard {s.path} holds token id {s.max_id:,} (its metadata says) but the vocabulary "
                              f"has {vocab_limit:,} ids; {where}")
        stats.append(st)
    if not scan_data:
        return
    cache = _load_cache()
    keys = [_key(s, st) for s, st in zip(shards, stats, strict=True)]
    todo = [i for i, k in enumerate(keys) if not _valid(_memo.get(k) or cache.get(k))]
    if todo:
        size = sum(stats[i].st_size for i in todo)
        if say and size > NOTE_BYTES:
            say(f"checking {size / 1e9:,.1f} GB of token shards (sizes, checksums, largest id); the result is "
                "cached, so this happens once")
        workers = min(len(todo), 4, os.cpu_count() or 1)  # hashing and numpy release the GIL
        with ThreadPoolExecutor(workers) as pool:
            found = list(pool.map(lambda i: scan(shards[i].path, shards[i].dtype, shards[i].sha256 is not None),
                                  todo))
        for i, res in zip(todo, found, strict=True):
            _memo[keys[i]] = res
    results = [_memo.get(k) or cache[k] for k in keys]
    for s, res in zip(shards, results, strict=True):
        if s.sha256 is not None and res.get("sha256") not in (None, s.sha256):
            raise ConfigError(f"shard {s.path} does not match the sha256 its metadata records: its bytes changed; "
                              f"`olmo validate-shards {s.path.parent}` locates the damage")
        if res["max_id"] >= vocab_limit:
            at = first_id_at_least(s.path, s.dtype, vocab_limit)
            raise ConfigError(f"shard {s.path} holds token id {res['max_id']:,} (first out-of-range id at token "
                              f"{at:,}) but the vocabulary has {vocab_limit:,} ids; {where}")
        if s.num_tokens is None and res["odd_zero"] and s.path.stat().st_size >= 256:
            raise ConfigError(f"shard {s.path} read as uint16 has 0 in every second token: it looks like uint32 "
                              "data; set data.dtype=uint32")
    fresh = {keys[i]: _memo[keys[i]] for i in todo if shards[i].sha256 is None or
             _memo[keys[i]].get("sha256") == shards[i].sha256}
    if fresh:
        _save_cache(fresh)
