"""The `olmo` command's one error type: an expected failure, told to the user as one line on stderr.

Everything the user can cause or fix (a bad recipe or number, a missing or unreadable path, a read-only or
occupied output, a damaged checkpoint, shard or Hugging Face folder, a full disk) raises `OlmoError` with a
message that names the file and says what to do. `olmo/cli/main.py` catches it once, prints `olmo: <message>` and
exits with `exit_code`: 2 for bad input, 1 where finding damage is the command's job (validate-shards) or a run
failed on its own numbers (a loss that became NaN).
Anything else escaping a command is a bug in olmo and is shown with its traceback.

This module imports nothing heavy (olmo_common is stdlib only): prepare-data's worker processes import it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

from olmo_common.cli_errors import one_line as one_line  # the one-line rule both CLIs share

# Errors of the machine or the user's paths, not of olmo: a full disk, a read-only mount, a missing folder.
ENVIRONMENT_ERRNOS = frozenset({
    errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR,
    errno.EEXIST, errno.ENOENT, errno.ENAMETOOLONG, errno.ELOOP, errno.EIO, errno.ENOTEMPTY, errno.EXDEV,
    errno.EMFILE, errno.ENFILE, errno.EFBIG, errno.ETXTBSY, errno.EBUSY,
})
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class OlmoError(Exception):
    """Bad input, bad data or a bad environment. The message says what is wrong and what to do."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(OlmoError):
    """A config value the run cannot use (exit code 2)."""


class Resumable(OlmoError):
    """A failure of the machine (a full disk, a worker killed for memory) after which finished work is kept,
    so rerunning the same command continues from it (exit code 2)."""


class DamageFound(OlmoError):
    """A command whose job is to look for damage found some (exit code 1)."""

    exit_code = 1


class TrainingFailed(OlmoError):
    """Training could not go on (e.g. the loss became NaN); the message says what to try (exit code 1)."""

    exit_code = 1


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or anything it wraps, is "no space left" (ENOSPC/EDQUOT). torch.save reports a full disk
    as a RuntimeError from its zip writer ("unexpected pos", "failed writing"), and DCP wraps every rank's
    error in a CheckpointException, so the whole chain is searched."""
    return any(_says_disk_full(e) for e in _chain(exc))


def _says_disk_full(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
        return True
    msg = str(e)
    if isinstance(e, RuntimeError) and ("unexpected pos" in msg or "failed writing" in msg.lower()):
        return True
    return "(os error 28)" in msg or "(os error 122)" in msg  # a Rust io::Error (safetensors): ENOSPC, EDQUOT


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception behind it, once each: causes, contexts, and the per-rank failures a
    torch.distributed.checkpoint CheckpointException holds."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [nested for nested in (e.__cause__, e.__context__) if nested is not None]
        todo += _rank_failures(e)


def _rank_failures(e: BaseException) -> list[BaseException]:
    failures = getattr(e, "failures", None)
    if not isinstance(failures, dict):
        return []
    # (exception, stack summary) pairs, or objects with .exc
    inner = [w[0] if isinstance(w, tuple) and w else getattr(w, "exc", w) for w in failures.values()]
    return [i for i in inner if isinstance(i, BaseException)]


# folders torch, Triton, Hugging Face and the system take from the environment: a failure there is that setting's
FOLDER_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "HF_HOME", "HF_DATASETS_CACHE",
                    "XDG_CACHE_HOME", "CUDA_CACHE_PATH", "TMPDIR")


def _named_by(path: str) -> str | None:
    """The environment variable naming the folder `path` is (or lies in), if one does."""
    for name in FOLDER_VARIABLES:
        value = os.environ.get(name, "").rstrip("/")
        if value and os.path.isabs(value) and (path == value or path.startswith(value + "/")):
            return name
    return None


def describe_os_error(e: OSError) -> str:
    """'PATH: Read-only file system' for an OSError that names its file, with the variable that chose the folder
    when one did ("... (TORCHINDUCTOR_CACHE_DIR names it: point it at a folder you can write, or unset it)")."""
    what = e.strerror or str(e)
    names = [n for n in (e.filename, e.filename2) if n]
    if not names:
        return what
    said = f"{' -> '.join(map(str, names))}: {what}"
    variable = next((v for n in names if (v := _named_by(os.fsdecode(n) if isinstance(n, bytes) else str(n)))), None)
    if variable is None:
        return said
    return f"{said} ({variable} names it: point {variable} at a folder you can write, or unset it)"
