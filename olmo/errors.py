"""The `olmo` command's one error type: an expected failure, told to the user as one line on stderr.

Everything the user can cause or fix (a bad recipe or number, a missing or unreadable path, a read-only or
occupied output, a damaged checkpoint, shard or Hugging Face folder, a full disk) raises `OlmoError` with a
message that names the file and says what to do. `olmo/cli/main.py` catches it once, prints `olmo: <message>` and
exits with `exit_code`: 2 for bad input, 1 where finding damage is the command's job (validate-shards).
Anything else escaping a command is a bug in olmo and is shown with its traceback.

This module imports nothing heavy: prepare-data's worker processes import it.
"""

from __future__ import annotations

import errno

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


def one_line(text: str) -> str:
    """`text` as one printable line: newlines and other control characters (from file contents or paths) would
    split or garble the single line the contract promises. A byte of a path that is not UTF-8 (Python keeps it as
    a lone surrogate) is shown as \\xNN, so the line still names the file exactly."""
    def show(c: str) -> str:
        if "\udc80" <= c <= "\udcff":
            return f"\\x{ord(c) - 0xDC00:02x}"
        return c if c.isprintable() else " "

    return " ".join("".join(map(show, part)) for part in str(text).splitlines()).strip()


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or anything it wraps, is "no space left" (ENOSPC/EDQUOT). torch.save reports a full disk
    as a RuntimeError from its zip writer ("unexpected pos", "failed writing"), and DCP wraps every rank's
    error in a CheckpointException, so the whole chain is searched."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS:
            return True
        msg = str(e)
        if isinstance(e, RuntimeError) and ("unexpected pos" in msg or "failed writing" in msg.lower()):
            return True
        for nested in (e.__cause__, e.__context__):
            if nested is not None:
                todo.append(nested)
        failures = getattr(e, "failures", None)  # torch.distributed.checkpoint.api.CheckpointException
        if isinstance(failures, dict):
            for wrapped in failures.values():  # (exception, stack summary) pairs, or objects with .exc
                inner = wrapped[0] if isinstance(wrapped, tuple) and wrapped else getattr(wrapped, "exc", wrapped)
                if isinstance(inner, BaseException):
                    todo.append(inner)
    return False


def describe_os_error(e: OSError) -> str:
    """'PATH: Read-only file system' for an OSError that names its file."""
    what = e.strerror or str(e)
    names = [n for n in (e.filename, e.filename2) if n]
    return f"{' -> '.join(map(str, names))}: {what}" if names else what
