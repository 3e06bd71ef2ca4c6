"""Values into shell text: the one place olmo-doctor quotes a value or a comment for a shell.

Every line we emit for a shell to run (`olmo-doctor env` in each format, `.olmo-doctor/env.sh`, the `$ export ...`
commands `check` and `fix` print) is built here, because a value is data: a GPU name, a CUDA_HOME or a path from
a report may hold `$(...)`, quotes, `;` or a newline, and must reach the shell as one literal word.

    quote(value, shell)         one word for bash (also zsh, dash and fish), fish or a dotenv file
    comment(text)               text safe after `#`: control characters and line separators become spaces
    env_line(name, value, why)  `export NAME='value'  # why` (or the fish / dotenv form)
    fill(pieces)                a command template's literals and values, each value quoted for where it sits

A value with a control character cannot be quoted safely everywhere (NUL ends a C string, a newline ends a
dotenv line), so `quote` refuses it with UnsafeValue; the facts layer already drops such values (facts.clean).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

SHELLS = ("bash", "fish", "dotenv")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A word every shell reads literally: the characters shlex.quote leaves bare, minus `%` (fish job expansion).
_PLAIN = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
# Characters that end or rewrite a line: C0/C1 controls (NUL, CR, LF, ESC, U+0085, DEL), the Unicode line and
# paragraph separators (the only characters of categories Zl and Zp), and the bidirectional overrides and marks
# that make a terminal or editor show text other than what runs. And lone surrogates: a byte of an environment
# value or a path that is not UTF-8 reaches Python as one (surrogateescape), or a report's JSON can spell one;
# no text encoding can write it, so it can be neither quoted for a shell nor printed as written.
_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ufeff\ud800-\udfff]")
SURROGATE = re.compile("[\ud800-\udfff]")


class UnsafeValue(ValueError):
    """A value that cannot become one literal shell word (it holds a control character)."""


def has_control(text: str) -> bool:
    return CONTROL.search(text) is not None


def quote(value: str, shell: str = "bash") -> str:
    """`value` as one literal word for `shell`. bash: a word bash, zsh, dash and fish all read as `value` (so a
    printed command can be pasted into any of them); fish: fish's own single quotes; dotenv: POSIX, as
    `set -a; . .env` reads it."""
    if shell not in SHELLS:
        raise ValueError(f"unknown shell {shell!r}; one of {', '.join(SHELLS)}")
    if has_control(value):
        raise UnsafeValue(f"value {value!r} holds a control character")
    if value and _PLAIN.match(value):
        return value
    if shell == "fish":  # fish single quotes know two escapes: \\ and \'
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if shell == "bash":
        return _any_shell(value)
    return shlex.quote(value)


def _any_shell(value: str) -> str:
    """One word for POSIX shells and fish alike: everything but ' and \\ in single quotes (literal in both), each '
    as "'" and each \\ as "\\\\" (the same in both, where fish's single quotes would read \\' and \\\\ as escapes)."""
    parts = re.split(r"(['\\])", value)
    return "".join({"'": "\"'\"", "\\": '"\\\\"'}.get(p, f"'{p}'") for p in parts if p) or "''"


def comment(text: str) -> str:
    """One line of comment text: control characters and line separators become spaces, runs of space collapse."""
    return " ".join(CONTROL.sub(" ", text).split())


def assign(name: str, value: str, shell: str = "bash") -> str:
    """The statement that sets an environment variable: export NAME=v / set -gx NAME v / NAME=v."""
    if not ENV_NAME.match(name):
        raise UnsafeValue(f"{name!r} is not an environment variable name")
    word = quote(value, shell)
    return {"bash": f"export {name}={word}", "fish": f"set -gx {name} {word}", "dotenv": f"{name}={word}"}[shell]


def env_line(name: str, value: str, reason: str = "", shell: str = "bash") -> str:
    """assign() with its reason as a trailing comment (dotenv lines carry none: not every parser allows one)."""
    line = assign(name, value, shell)
    why = comment(reason)
    return f"{line}  # {why}" if why and shell != "dotenv" else line


def fill(pieces: Iterable[tuple[str, str | list[str] | None]]) -> str:
    """A POSIX command from (literal, value) pairs: each value quoted for the context the literals leave it in.

    Outside quotes a value is shlex-quoted; inside '...' or "..." the quote is closed, the value quoted, and the
    quote reopened; after a `#` comment starts, the value is only made one line. Plain values are left as they are,
    so `export CUDA_HOME=/usr/local/cuda-13.0` prints as written. A list is several words, each quoted on its own
    (inside quotes or a comment it is one value, its items separated by spaces)."""
    out: list[str] = []
    state = "none"  # none, single, double, comment
    for literal, value in pieces:
        state = _scan(literal, state, out[-1][-1:] if out else "")
        out.append(literal)
        if value is not None:
            out.append(_quoted_for(value, state))
    return "".join(out)


def _quoted_for(value: str | list[str], state: str) -> str:
    """A template value as command text where the literals before it leave the quoting `state`."""
    if isinstance(value, list):
        if state == "none":
            return " ".join(_word(v) for v in value) if value else "''"
        value = " ".join(value)
    if state == "comment":
        return comment(value)
    if has_control(value):
        return "unknown"  # the facts layer drops these; never let one reach a command line
    if value and _PLAIN.match(value):
        return value
    q = quote(value)
    return {"none": q, "single": f"'{q}'", "double": f'"{q}"'}[state]


def _word(value: str) -> str:
    """One shell word outside quotes (a control character never reaches a command line)."""
    if has_control(value):
        return "unknown"
    return value if value and _PLAIN.match(value) else shlex.quote(value)


_CLOSES = {"comment": "\n", "single": "'"}  # what ends a comment or single quotes (no escapes inside)


def _opens(c: str, prev: str) -> str:
    """What an unquoted character starts: single or double quotes, a comment (a # that starts a word), or none."""
    if c == "'":
        return "single"
    if c == '"':
        return "double"
    if c == "#" and (not prev or prev.isspace() or prev in ";&|()"):
        return "comment"
    return "none"


def _scan(text: str, state: str, before: str) -> str:
    """The quoting state after `text`, starting in `state` (`before`: the character preceding `text`)."""
    i = 0
    while i < len(text):
        c = text[i]
        if state in _CLOSES:
            state = "none" if c == _CLOSES[state] else state
        elif c == "\\":  # outside quotes and in double quotes: the next character is escaped
            i += 1
        elif state == "double":
            state = "none" if c == '"' else state
        else:
            state = _opens(c, text[i - 1] if i else before)
        i += 1
    return state
