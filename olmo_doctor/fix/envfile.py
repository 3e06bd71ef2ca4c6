"""The project's `.olmo-doctor/env.sh`: the exports and limits that safe fixes write, for the user to `source`.

Our lines live in a marked block, so anything the user writes outside it survives every rewrite:

    # >>> olmo-doctor >>>
    # MAX_JOBS: 16 usable CPUs and 120 GB available at ~6.5 GB per nvcc job
    export MAX_JOBS=16
    # OD230 Raise the open-files limit to the hard limit
    ulimit -Sn "$(ulimit -Hn)"
    # <<< olmo-doctor <<<

Entries are keyed (a variable name, or `ulimit:<resource>`) and sticky: a rewrite updates the entries it has new
values for and keeps the others. That is what makes a second `fix --apply` a no-op even after the user sourced the
file (the finding that asked for CUDA_HOME no longer fires, yet its export must stay). An entry whose statement
is unchanged keeps its old comment too, so a reason that mentions today's free memory does not churn the file.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from olmo_doctor.rules.actions import ULIMIT_FLAGS, EnvSet, EnvUnset, Ulimit
from olmo_doctor.shell import assign, comment

ENV_FILE = ".olmo-doctor/env.sh"
BEGIN = "# >>> olmo-doctor >>>"
END = "# <<< olmo-doctor <<<"
HEADER = (
    "# Written by `olmo-doctor fix --apply`; load it with: source .olmo-doctor/env.sh",
    "# fix --apply rewrites the lines between the markers (olmo-doctor fix --undo restores the previous file);",
    "# put your own lines outside them.",
)
_FLAG_TO_RESOURCE = {flag[1]: res for res, flag in ULIMIT_FLAGS.items()}


@dataclass(frozen=True)
class Entry:
    key: str  # NAME for export/unset (an unset replaces an export of the same name), ulimit:<resource>
    statement: str  # the one shell line
    comment: str = ""  # one line saying why


@dataclass
class EnvFile:
    """A parsed env.sh: the user's lines around our block, and the block's entries in order."""

    before: list[str]
    entries: list[Entry]
    after: list[str]

    def render(self) -> str:
        lines = list(self.before)
        if lines and lines[-1].strip():
            lines.append("")
        lines += [BEGIN, *HEADER]
        for e in self.entries:
            if comment(e.comment):
                lines.append(f"# {comment(e.comment)}")
            lines.append(e.statement)
        lines.append(END)
        lines += self.after
        return "\n".join(lines) + "\n"


def statement(action: EnvSet | EnvUnset | Ulimit) -> str:
    if isinstance(action, EnvSet):
        return assign(action.name, action.value)
    if isinstance(action, EnvUnset):
        return f"unset {action.name}"
    flag = ULIMIT_FLAGS[action.resource][1]
    # -S: raise only the soft limit; a plain `ulimit -n N` would also lower the hard limit for good
    return f'ulimit -S{flag} "$(ulimit -H{flag})"' if action.value == "hard" else f"ulimit -S{flag} {action.value}"


def key_of(action: EnvSet | EnvUnset | Ulimit) -> str:
    return f"ulimit:{action.resource}" if isinstance(action, Ulimit) else action.name


def entry(action: EnvSet | EnvUnset | Ulimit, why: str) -> Entry:
    return Entry(key_of(action), statement(action), comment(why))


def _statement_key(line: str) -> str | None:
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    key = _KEYS.get((words[0], len(words))) if words else None
    return key(words) if key else None


def _export_key(words: list[str]) -> str | None:
    return words[1].split("=", 1)[0] if "=" in words[1] else None


def _ulimit_key(words: list[str]) -> str | None:
    flag = words[1]
    return f"ulimit:{_FLAG_TO_RESOURCE[flag[2:]]}" if flag[:2] == "-S" and flag[2:] in _FLAG_TO_RESOURCE else None


# (command, words in the statement) -> the key of a statement we write: export NAME=value, unset NAME,
# ulimit -S<flag> value
_KEYS: dict[tuple[str, int], Callable[[list[str]], str | None]] = {
    ("export", 2): _export_key,
    ("unset", 2): lambda words: words[1],
    ("ulimit", 3): _ulimit_key,
}


def _without_blank_tail(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _entries(block: list[str]) -> list[Entry]:
    """The statements of our block, each with the `# reason` comment above it."""
    entries: list[Entry] = []
    pending = ""
    for line in block:
        if line in HEADER or not line.strip():
            continue
        if line.startswith("#"):
            pending = line[1:].strip()
            continue
        key = _statement_key(line)
        entries.append(Entry(key if key else f"raw:{line}", line, pending))  # keep lines we did not write
        pending = ""
    return entries


def parse(text: str) -> EnvFile:
    # Lines as the shell sees them: only \n ends one. str.splitlines would also split at \r, \x85 or U+2028,
    # and a rewrite joining with \n would turn text a shell reads as one comment into a command of its own.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if BEGIN not in lines or END not in lines[lines.index(BEGIN):]:
        return EnvFile(_without_blank_tail(lines), [], [])
    start = lines.index(BEGIN)
    end = lines.index(END, start)
    return EnvFile(_without_blank_tail(lines[:start]), _entries(lines[start + 1 : end]), lines[end + 1 :])


def merge(existing: Iterable[Entry], new: Iterable[Entry]) -> list[Entry]:
    """Existing entries in their order, each updated by a new entry with its key; new keys appended in order."""
    out = {e.key: e for e in existing}
    for e in new:
        old = out.get(e.key)
        if old is not None and old.statement == e.statement:
            continue  # same line: keep its original comment, so the file does not churn
        out[e.key] = e
    return list(out.values())


def updated(text: str | None, new: Iterable[Entry]) -> str:
    """The env file text after merging `new` entries into `text` (None: the file does not exist yet)."""
    doc = parse(text or "")
    doc.entries = merge(doc.entries, new)
    return doc.render()


@dataclass(frozen=True)
class Overlay:
    """What sourcing the block would do to a process: variables set and unset, soft limits raised."""

    set: dict[str, str]
    unset: frozenset[str]
    limits: dict[str, str]  # resource -> "hard" or a number


def overlay(text: str, only: set[str] | frozenset[str] | None = None) -> Overlay:
    """What sourcing the block would do; with `only`, just the statements in it (the doctor's own lines)."""
    env: dict[str, str] = {}
    unset: set[str] = set()
    limits: dict[str, str] = {}
    for e in parse(text).entries:
        if only is not None and e.statement not in only:
            continue
        words = shlex.split(e.statement) if not e.key.startswith("raw:") else []
        if words[:1] == ["export"]:
            name, value = words[1].split("=", 1)
            env[name] = value
            unset.discard(name)
        elif words[:1] == ["unset"]:
            env.pop(words[1], None)
            unset.add(words[1])
        elif words[:1] == ["ulimit"]:
            limits[e.key.split(":", 1)[1]] = "hard" if words[2].startswith("$(") else words[2]
    return Overlay(env, frozenset(unset), limits)
