"""Open and read files within a budget: only regular files, never more bytes than their kind can hold.

    data = read_bytes(path, "journal manifest")     # the bytes, or ReadRefused (an OSError) in one line
    text = read_text(path, "recipe")                 # the same, decoded (UTF-8 unless told)
    with open_regular(path) as f: ...                # a stream (logs, archives), same refusals
    digest = sha256_file(path)                       # a file's sha256, streamed, same refusals

A FIFO would block the open (no writer) or the read (a writer that never writes), a character device such as
/dev/zero or /dev/urandom never ends, a socket or a folder is not data: the file is opened with O_NONBLOCK (the
open of a FIFO then returns at once) and refused unless fstat says it is a regular file. A regular file larger
than its kind's cap is refused from its size alone, before a byte is read; files that report no size (/proc)
are read to one byte past the cap and refused then. The refusal names the file and the cap:

    /home/u/run/checkpoints/latest: 3.0 GiB, larger than 4 KiB, the most a checkpoint pointer can be

ReadRefused is an OSError, so callers that turn unreadable files into one line already handle it, and its
`strerror` reads well after "cannot be read (...)". The caps live in one table, `CAPS`: each is far above any
real file of its kind (sizes measured or documented next to it) and far below what would hurt memory.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# kind -> the most bytes a real file of that kind holds (a generous bound, not a typical size)
CAPS: dict[str, int] = {
    # olmo
    "recipe": 1 * MiB,  # the shipped recipes are ~1 KB
    "checkpoint pointer": 4 * KiB,  # checkpoints/latest holds a folder name
    "train state": 16 * MiB,  # train_state.json: counters, RNG states (~10 KB)
    "model config": 16 * MiB,  # config.json, generation_config.json, *.safetensors.index.json (~100 KB at 405B)
    # tokenizer.json: ~9 MB for Llama 3's 128K vocab; Gemma 3's 262,144-token one is big enough that its model repos
    # keep it in Git LFS (their .gitattributes; about 33 MB), the largest we know
    "tokenizer": 64 * MiB,
    "tokenizer config": 16 * MiB,  # tokenizer_config.json, special_tokens_map.json
    "shard manifest": 128 * MiB,  # manifest.json: ~12 KB per 1 GiB shard with its CRCs
    "shard sidecar": 4 * MiB,  # part-NNNNN.json: one shard's metadata
    "prepare job": 16 * MiB,  # prepare-data's job file: the input list
    "dataset index": 1 * MiB,  # a saved `datasets` folder's state.json / dataset_info.json (~1 KB)
    "checkpoint index": 256 * MiB,  # a distributed checkpoint's .metadata (one entry per tensor shard)
    "metrics line": 1 * MiB,  # one record of metrics.jsonl (the file itself is streamed)
    "cache entry": 16 * MiB,  # JSON caches under ~/.cache
    "run id": 4 * KiB,  # run_dir/wandb_run_id: one W&B run id
    # olmo-doctor
    "report": 16 * MiB,  # a collect_env output is ~10 KB, an `olmo-doctor report` ~50 KB
    "journal manifest": 4 * MiB,  # a fix journal entry's manifest.json (~5 KB)
    "journal file": 64 * MiB,  # a file a fix journal backed up (env.sh, a shell rc file)
    "env file": 4 * MiB,  # .olmo-doctor/env.sh
    "wheel cache record": 1 * MiB,  # a cached wheel's key.json or record.json (~2 KB)
    "build state": 16 * MiB,  # the verify state, a subset marker, pip's --report output
    "build log": 64 * MiB,  # build-kernels' own log, read back for its first error (the tail is what counts)
    "source file": 16 * MiB,  # a flash-attn/xformers source file a subset edits (setup.py ~30 KB)
    "package metadata": 64 * MiB,  # a dist-info's RECORD (torch's is ~2 MB), WHEEL, entry_points.txt
    "rules": 4 * MiB,  # a known_issues/*.toml or build recipe .toml (~20 KB)
    "toolkit file": 16 * MiB,  # CUDA's version.json, crt/host_config.h
    "system file": 16 * MiB,  # /proc and /sys files, /etc/os-release
    "library": 256 * MiB,  # libstdc++.so.6 (~2.5 MB), scanned for its GLIBCXX versions
}


class ReadRefused(OSError):
    """A file refused before its contents are read. `strerror` says why ("a FIFO (named pipe), not a regular
    file"; "3.0 GiB, larger than 1 MiB, the most a recipe can be"); str() is `<file>: <why>`, one line."""

    def __init__(self, code: int, why: str, path: str | os.PathLike[str], special: str = "") -> None:
        super().__init__(code, why, os.fspath(path))
        self.special = special  # what it is when it is not a regular file: "a FIFO (named pipe)", ...

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def size_text(n: int) -> str:
    """'3.0 GiB', '4 KiB', '812 bytes': a size as a person reads it."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if n % scale else f"{n // scale} {unit}"
    return f"{n} bytes"


FIFO = "a FIFO (named pipe)"
_SPECIAL = ((stat.S_ISFIFO, FIFO), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words ("a FIFO (named pipe)", "a folder", ...)."""
    return next((name for test, name in _SPECIAL if test(mode)), "not a regular file")


def cap_of(kind: str) -> int:
    """The cap of a kind of file; KeyError for a kind not in CAPS (a typo in the caller)."""
    return CAPS[kind]


def too_large(path: str | os.PathLike[str], kind: str, size: int | None = None, cap: int | None = None
              ) -> ReadRefused:
    """The refusal of a file of `kind` that holds `size` bytes (None: more than the cap)."""
    cap = CAPS[kind] if cap is None else cap
    shown = f"{size_text(size)}, larger" if size is not None else "larger"
    return ReadRefused(errno.EFBIG, f"{shown} than {size_text(cap)}, the most a {kind} can be", path)


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> BinaryIO:
    """`path` opened for reading, refused (ReadRefused) unless it is a regular file; `follow=False` also refuses
    a symlink at `path` itself (O_NOFOLLOW: ELOOP). Never blocks on a FIFO."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = file_kind(mode)
            raise ReadRefused(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL, f"{what}, not a regular file",
                              path, what)
        os.set_blocking(fd, True)  # a regular file never blocks; a stream wrapper expects blocking reads
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


FIRST_READ = 64 * KiB  # what a file that reports no size is read by at first (a /proc file is a few KiB)


def _read_up_to(f: BinaryIO, most: int, size: int) -> bytes:
    """At most `most` bytes of `f`, read in pieces sized by what the file says it holds: `f.read(n)` allocates n
    bytes before it reads, so one read of the cap would ask for megabytes to read a small file (and fail under a
    memory limit, where the error path itself reads small files)."""
    pieces: list[bytes] = []
    got = 0
    want = max(size + 1, FIRST_READ)
    while got < most:
        piece = f.read(min(want, most - got))
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
        want = min(want * 2, 16 * MiB)  # a file that grows while read, or a /proc file past its first piece
    return b"".join(pieces)


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The file's sha256, streamed (wheels and sdists are gigabytes); a FIFO or a device is refused, never read
    forever."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_bytes(path: str | os.PathLike[str], kind: str, *, follow: bool = True, limit: int | None = None
               ) -> bytes:
    """The bytes of a regular file of `kind` (a key of CAPS; `limit` overrides its cap); ReadRefused when it is
    not a regular file or is larger than the cap, refused from its size before anything is read."""
    cap = CAPS[kind] if limit is None else limit
    with open_regular(path, follow=follow) as f:
        size = os.fstat(f.fileno()).st_size
        if size > cap:
            raise too_large(path, kind, size, cap)
        data = _read_up_to(f, cap + 1, size)  # files that report no size (/proc) or grow while read stop here
    if len(data) > cap:
        raise too_large(path, kind, None, cap)
    return data


def read_text(path: str | os.PathLike[str], kind: str, *, encoding: str = "utf-8", errors: str = "strict",
              follow: bool = True, limit: int | None = None) -> str:
    """`read_bytes` decoded; UnicodeDecodeError (a ValueError) as `bytes.decode` raises it for errors='strict'.
    Newlines are kept as they are (no universal-newline translation)."""
    return read_bytes(path, kind, follow=follow, limit=limit).decode(encoding, errors)


def read_lines(path: str | os.PathLike[str], kind: str, *, follow: bool = True) -> Iterator[bytes]:
    """The lines of a file of any size, streamed (its kind caps one line: a longer line is yielded cut to the
    cap plus one byte, so a caller can tell it from a real line and drop it)."""
    cap = CAPS[kind]
    with open_regular(path, follow=follow) as f:
        while line := f.readline(cap + 1):
            if len(line) > cap and not line.endswith(b"\n"):
                while (rest := f.readline(cap + 1)) and not rest.endswith(b"\n"):
                    pass  # the rest of the overlong line, read in bounded pieces and dropped
            yield line


def regular_size(path: Path) -> int | None:
    """The size of a regular file at `path` (symlinks followed), None when there is none; never opens it."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None
