"""Owned outputs: an `olmo` command deletes or replaces only what it created.

Every command that writes an output folder (export-hf, import-hf, prepare-data, the smoke run kept with --keep)
writes a marker in it, `.olmo-output.json` (`{"olmo_output": "<command>"}`), and `claim(out, command)` says,
before any work, what may happen to an existing `out`:

- it does not exist, or is an empty folder: the output is written there (nothing is lost)
- it holds the same command's earlier output (its marker, and nothing in it but files that command writes):
  it may be replaced (`--overwrite`; prepare-data also resumes or reuses it)
- anything else is refused in one line, whatever the flags: a symlink, a file, a run_dir (config.yaml with
  checkpoints/ or metrics.jsonl), a checkpoint (train_state.json, DCP's .metadata, OLMo-core's model_and_optim/),
  a data folder (manifest.json, prepare.json, token shards), another command's output, a folder holding any of
  these, one holding files the command did not write, and a folder lying inside a checkpoint, a data folder or
  another output (an output may be new inside a run_dir, but is never replaced there).

The new output is built in a temp folder beside `out` (`.NAME.tmp-XXXXXXXX`, made by mkdtemp) and swapped in by
renames (`publish`): the old folder is moved aside, the new one renamed into place, then the old one is emptied of
the files its command writes (never following a link) and removed; anything else found in it by then is left
there, in the moved-aside folder, and named. A failure before the swap leaves the old output as it was; the
swap itself refuses a folder that a live reader holds (olmo/lock.py: `olmo train` holds its data folders).
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import json
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from olmo.errors import OlmoError
from olmo.lock import LOCK_NAME, DirLock, hold_for_replacing, let_go
from olmo.terminal import plain
from olmo_common.bounded.data import load_json
from olmo_common.bounded.files import open_regular

MARKER = ".olmo-output.json"


@dataclass(frozen=True)
class Kind:
    command: str  # as the user types it: "export-hf"
    option: str  # how the output is named in messages and --help: "OUT_DIR"
    files: tuple[str, ...]  # fnmatch patterns of every path (relative, '/'-separated) the command writes


_HF_TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
_RUN = ("config.yaml", "metrics.jsonl", "checkpoints", "checkpoints/*", "tb", "tb/*", "wandb", "wandb/*",
        ".olmo-shared-check-*", ".config.yaml.*.tmp", ".metrics.jsonl.*.tmp")
KINDS = {k.command: k for k in (
    Kind("export-hf", "OUT_DIR", ("config.json", "generation_config.json", *_HF_TOKENIZER, "model.safetensors",
                                  "model-*-of-*.safetensors", "model.safetensors.index.json")),
    Kind("import-hf", "OUT_CHECKPOINT", (".metadata", "*.distcp", "train_state.json", "recipe.yaml",
                                         *_HF_TOKENIZER)),
    Kind("prepare-data", "--output", ("part-*.npy", "part-*.json", "manifest.json", "prepare.json", ".part-*.tmp*",
                                      ".manifest.json.*tmp*", ".prepare.json.*tmp*")),
    Kind("train", "run_dir", _RUN),
    Kind("train --smoke", "--keep", _RUN),
)}
OURS = (MARKER, f".{MARKER}.*.tmp", LOCK_NAME)  # in every output: the marker (and its temp name), a lock file


def writes(command: str, rel: str) -> bool:
    """Whether `command` writes a path named `rel` (relative to its output folder, '/'-separated) there."""
    return any(fnmatch.fnmatchcase(rel, p) for p in (*KINDS[command].files, *OURS))


# ------------------------------------------------------------------------------------ what a folder is
def _is_dir(p: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _exists(p: Path) -> bool:
    return os.path.lexists(p)


def marker_of(folder: Path) -> str | None:
    """The command whose marker `folder` holds (read without following a link), or None."""
    path = folder / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = json.loads(os.read(fd, 4096).decode())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    finally:
        os.close(fd)
    command = raw.get("olmo_output") if isinstance(raw, dict) else None
    return command if command in KINDS else None


def _legacy_prepare(folder: Path) -> bool:
    """A prepare-data output of a version before markers: its prepare.json job record."""
    try:
        job = load_json(folder / "prepare.json", "prepare job")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(job, dict) and {"inputs", "tokenizer_sha256", "shard_tokens"} <= job.keys()


def command_of(folder: Path) -> str | None:
    found = marker_of(folder)
    if found is None and _legacy_prepare(folder) and not (folder / MARKER).exists():
        return "prepare-data"
    return found


# Each kind of folder olmo makes, told by its own files. Checked for the folder itself, its ancestors and (for a
# folder to be replaced) what it holds.
def _run_dir(p: Path) -> bool:
    return _is_dir(p / "checkpoints") and ((p / "config.yaml").is_file() or (p / "metrics.jsonl").is_file())


def _checkpoint(p: Path) -> bool:
    return any(_exists(p / n) for n in ("train_state.json", ".metadata", "model_and_optim"))


def _checkpoints(p: Path) -> bool:
    return p.name == "checkpoints" and (_exists(p / "latest") or any(p.glob("step*")))


def _data(p: Path) -> bool:
    return any(_exists(p / n) for n in ("manifest.json", "prepare.json", "part-00000.npy", "part-00000.json"))


DETECTORS = (("a run_dir", _run_dir), ("a checkpoint", _checkpoint), ("a checkpoints folder", _checkpoints),
             ("a data folder", _data))


def what_is(folder: Path) -> str | None:
    """'a run_dir', 'a checkpoint', 'a data folder' or 'the output of `olmo X`' for a folder olmo or OLMo-core
    made, else None."""
    command = command_of(folder)
    if command is not None:
        return "a run_dir" if command.startswith("train") else f"the output of `olmo {command}`"
    return next((name for name, test in DETECTORS if test(folder)), None)


# ------------------------------------------------------------------------------------------- the claim
@dataclass
class Claim:
    """What `out` is to the command: 'new' (absent), 'empty' or 'own' (its earlier output)."""

    out: Path
    kind: Kind
    state: str


def _refuse(kind: Kind, out: Path, why: str, advice: str = "") -> OlmoError:
    advice = advice or f"choose another {kind.option}"
    return OlmoError(f"{kind.command} will not write to {out}: {why}; {advice} (olmo replaces only its own "
                     "earlier output, see --help)")


def _check_ancestors(kind: Kind, out: Path, replacing: bool) -> None:
    """Refuse an output lying inside a checkpoint, a data folder or another output (it would change them), or,
    when replacing, inside a run_dir."""
    here = Path(os.path.realpath(out.parent))
    for parent in (here, *here.parents):
        what = what_is(parent)
        if what is None or (what == "a run_dir" and not replacing):
            continue
        raise _refuse(kind, out, f"it lies inside {what}, {parent}", f"write the output outside {parent}")


def _foreign(kind: Kind, out: Path) -> str | None:
    """The first path under `out` its command does not write (or a link, or a special file), or None."""
    for root, dirs, files in os.walk(out):
        for name in sorted(dirs) + sorted(files):
            rel = os.path.relpath(os.path.join(root, name), out).replace(os.sep, "/")
            mode = os.lstat(os.path.join(root, name)).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"{rel} (a link or special file)"
            if not writes(kind.command, rel):
                return rel
    return None


def _inside(out: Path, budget: int = 10_000) -> str | None:
    """'runs/tiny (a run_dir)' when `out` holds, one or two levels down, something olmo made, else None (for the
    message only: at most `budget` entries are looked at, and an unreadable folder is passed over)."""
    def children(folder: Path) -> list[Path]:
        try:
            return sorted(folder.iterdir()) if _is_dir(folder) else []
        except OSError:
            return []

    for child in children(out):
        for p in (child, *children(child)):
            budget -= 1
            if budget < 0:
                return None
            what = what_is(p) if _is_dir(p) else None
            if what is not None:
                return f"{p} ({what})"
    return None


def claim(out: Path, command: str, option: str | None = None) -> Claim:
    """What may happen to `out` (see the module docstring): a Claim, or OlmoError saying why nothing may.
    `option`: how the user named `out` when not the command's own option (the smoke run's --keep)."""
    kind = KINDS[command] if option is None else dataclasses.replace(KINDS[command], option=option)
    out = Path(out)
    if os.path.islink(out):
        raise _refuse(kind, out, "it is a symlink (olmo never replaces a link, nor what it points at)",
                      f"give the folder itself or a new {kind.option}")
    if not _exists(out):
        _check_ancestors(kind, out, replacing=False)
        return Claim(out, kind, "new")
    if not _is_dir(out):
        raise _refuse(kind, out, "it is a file, not a folder")
    DirLock(out, kind.option).check_free()  # a live command there is named (pid), whatever the folder is
    if all(p.name == LOCK_NAME and p.is_file() and not p.is_symlink() for p in out.iterdir()):
        _check_ancestors(kind, out, replacing=False)  # nothing in it to lose: as if new
        return Claim(out, kind, "empty")  # nothing, or the lock file a killed command left (free: checked above)
    _check_ours(kind, out, command)
    _check_ancestors(kind, out, replacing=True)
    return Claim(out, kind, "own")


def _check_ours(kind: Kind, out: Path, command: str) -> None:
    """OlmoError unless the folder `out` is an earlier output of `command` holding only files it writes."""
    if command_of(out) != command:
        what = what_is(out)
        inside = _inside(out) if what is None else None
        why = (f"it is {what}" if what else f"it holds {inside}" if inside else
               f"{command} did not write it (it has no {MARKER} of {command})")
        raise _refuse(kind, out, why)
    stray = _foreign(kind, out)
    if stray is not None:
        raise _refuse(kind, out, f"it holds {stray}, which {command} did not write",
                      f"move that out or choose another {kind.option}")


RUN_FILES = ("config.yaml", "metrics.jsonl", "checkpoints/latest")  # what `olmo train` rewrites in its run_dir


def _olmo_config(path: Path) -> bool:
    """A config.yaml `olmo train` wrote (before runs carried a marker): its top-level sections, read as text
    (a YAML parse of a stranger's file is not needed to tell, nor safe to do here)."""
    try:
        with open_regular(path) as f:  # a FIFO named config.yaml must not hang the check
            head = f.read(1 << 20).decode("utf-8", "replace").splitlines()
    except OSError:
        return False
    return {"model:", "data:", "optim:"} <= {ln.rstrip() for ln in head} and any(ln.startswith("run_dir:")
                                                                                 for ln in head)


def _run_dir_ancestors(run_dir: Path) -> None:
    """OlmoError when `run_dir` lies inside a checkpoint, a data folder or another command's output: a run there
    would add its checkpoints to them (a data folder then holds files prepare-data did not write, and is no
    longer its to replace). Inside another run_dir (runs/base/ft) is allowed, as for outputs."""
    here = Path(os.path.realpath(run_dir)).parent
    for parent in (here, *here.parents):
        what = what_is(parent)
        if what is not None and what != "a run_dir":
            raise OlmoError(f"run_dir {run_dir} lies inside {what}, {parent}; `olmo train` would add its "
                            f"checkpoints there: choose a run_dir outside {parent}")


def check_run_dir(run_dir: Path) -> None:
    """OlmoError when `olmo train` would replace a file it did not write in `run_dir` (its config.yaml,
    metrics.jsonl or checkpoints/latest), or `run_dir` is, or lies inside, a checkpoint, a data folder or another
    command's output. A run_dir of olmo's (its marker, or an older run's config.yaml) is its own; anything else may hold
    the user's files, which a run only adds to."""
    _run_dir_ancestors(run_dir)
    if not _is_dir(run_dir) and not (os.path.islink(run_dir) and run_dir.is_dir()):
        return
    owner = command_of(run_dir)
    if owner in ("train", "train --smoke"):
        return
    what = what_is(run_dir) if owner is None else f"the output of `olmo {owner}`"
    if what is not None and what != "a run_dir":
        raise OlmoError(f"run_dir {run_dir} is {what}; `olmo train` writes its config, metrics and checkpoints "
                        "into a run_dir of its own: choose a new run_dir")
    if _olmo_config(run_dir / "config.yaml"):
        return
    clash = next((n for n in RUN_FILES if _exists(run_dir / n)), None)
    if clash is not None:
        raise OlmoError(f"run_dir {run_dir} holds {clash}, which `olmo train` did not write (it has no {MARKER} "
                        "of a run); a run would replace it: choose a new run_dir")


def overwrite_help(command: str) -> str:
    """What `--overwrite` does, for the command's --help (the rule of this module, in the user's words)."""
    kind = KINDS[command]
    return (f"Replace {kind.option} when it is empty or holds an earlier {command} output (its {MARKER} marker "
            f"and only files {command} writes). Never replaced (refused, exit 2): a symlink, a file, a run_dir, a "
            "checkpoint, a data folder, another command's output, a folder holding one of these or other files, "
            "or one inside a run_dir, checkpoint, data folder or other output. The new output is written beside "
            f"{kind.option} and swapped in by rename, so a failure leaves the old one; a folder a running `olmo "
            "train` reads is never replaced.")


def require_overwrite(claimed: Claim, overwrite: bool) -> None:
    """For commands that always write a whole new output: an earlier output of theirs needs --overwrite."""
    if claimed.state != "new" and not overwrite:
        what = ("an earlier `olmo " + claimed.kind.command + "` output" if claimed.state == "own"
                else "nothing (an empty folder)")
        raise OlmoError(f"{claimed.out} already exists and holds {what}; pass --overwrite to replace it, or choose "
                        f"another {claimed.kind.option}")


# ------------------------------------------------------------------------------------- writing and swapping
def write_marker(folder: Path, command: str) -> None:
    from olmo.fsutil import atomic_write_bytes

    atomic_write_bytes(folder / MARKER, (json.dumps({"olmo_output": command}) + "\n").encode())


def new_temp(claimed: Claim) -> Path:
    """A fresh folder beside `claimed.out` (made by this process: nothing else is in it) holding the marker."""
    claimed.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=claimed.out.parent, prefix=f".{claimed.out.name}.tmp-"))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; an output folder is meant to be shared
    write_marker(tmp, claimed.kind.command)
    return tmp


def discard(tmp: Path) -> None:
    """Remove a temp folder `new_temp` made (everything in it was written by this process)."""
    if _is_dir(tmp):
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish(claimed: Claim, tmp: Path, overwrite: bool = True) -> None:
    """Put the finished `tmp` at `claimed.out` by renames. `claimed.out` is claimed again first (it may have changed
    since: a second command may have written there meanwhile) and held exclusively (a live reader refuses). When
    something its command did not write turns up in the old folder, that folder is kept aside and named."""
    from olmo.fsutil import fsync_dir

    again = claim(claimed.out, claimed.kind.command)
    require_overwrite(again, overwrite)
    if again.state == "new":
        try:
            os.rename(tmp, claimed.out)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
            raise OlmoError(f"{claimed.out} appeared while {claimed.kind.command} was writing (another command writing "
                            "there?); nothing of it was changed: run the command again") from None
        fsync_dir(claimed.out.parent)
        return
    held = hold_for_replacing(claimed.out, claimed.kind.option)
    try:
        old = Path(tempfile.mkdtemp(dir=claimed.out.parent, prefix=f".{claimed.out.name}.old-"))
        os.rename(claimed.out, old)  # over the empty folder mkdtemp made: atomic
    finally:
        let_go(held)
    os.rename(tmp, claimed.out)
    fsync_dir(claimed.out.parent)
    kept = remove_own(old, claimed.kind)
    if kept is not None:
        print(f"olmo: warning: the earlier {plain(claimed.out)} held files {claimed.kind.command} did not write by "
              f"the time it was replaced; they are kept in {plain(kept)}", file=sys.stderr)


def remove_own(folder: Path, kind: Kind) -> Path | None:
    """Delete from `folder` the files and folders `kind`'s command writes (never following a link), then the
    folder itself when that leaves it empty. Returns `folder` when anything else is left in it, else None."""
    if not _is_dir(folder):
        return folder if _exists(folder) else None
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files + dirs:
            path = os.path.join(root, name)
            if not writes(kind.command, os.path.relpath(path, folder).replace(os.sep, "/")):
                continue
            mode = os.lstat(path).st_mode
            try:
                if stat.S_ISDIR(mode):
                    os.rmdir(path)  # emptied above, bottom-up; a folder with anything else in it stays
                elif stat.S_ISREG(mode):
                    os.unlink(path)
            except OSError:
                pass
    try:
        folder.rmdir()
    except OSError:
        return folder
    return None
