"""Hide the user's home folder and name in a report before it is serialised.

Redaction works on the decoded strings of the report (never on JSON text, where `é` is already `\\u00e9`), for
any name length and alphabet. A name counts where it stands as a token: letters and digits on either side make
it part of another word (`al` in `alpha` stays), anything else, `_`, `-`, `.`, `/`, `@`, a space, ends it
(`al_env`, `al@host`, `/scratch/al/`). Names of one or two characters are common as plain words (`a`, `to`), so
they are redacted only inside path- or identifier-like words (holding `/`, `\\`, `@`, `_`, `=`, `:` or `~`), as a
whole value, or as a whole quoted string in JSON text; longer names everywhere.

    redact(value, home, user, hosts)   the same JSON-like value (dict, list, str, ...) with home -> ~,
                                       each name -> <user> and each host name -> <host>

Names match in any letter case and Unicode normal form (`Alice` in /scratch/Alice/, `josé` typed as e + U+0301):
the text is brought to NFC first, so the characters a person reads are the ones compared.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any

USER = "<user>"
HOST = "<host>"
SHORT = 2  # names this long or shorter are only redacted inside path-like words
# Not identifying, and a common word in paths and keys (toolkit_root): only its home folder is redacted.
_GENERIC = frozenset({"root"})
# Default host names of installers and images: they identify nobody, and `ubuntu` also names the OS in a report.
_GENERIC_HOSTS = frozenset({"localhost", "ubuntu", "debian", "fedora", "centos", "rocky", "almalinux", "archlinux",
                            "raspberrypi", "linux", "docker", "container"})
_PATHLIKE = re.compile(r"[/\\@_=:~]")


def _token(name: str) -> re.Pattern[str]:
    # [^\W_] is a letter or digit in any alphabet: `_` and punctuation end a token, letters do not
    return re.compile(rf"(?<![^\W_]){re.escape(_nfc(name))}(?![^\W_])", re.IGNORECASE)


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _home(home: str) -> re.Pattern[str] | None:
    home = home.rstrip("/")
    if not home:
        return None
    return re.compile(rf"{re.escape(home)}(?![\w.\-])")  # /home/al, not /home/alice or /home/al_old


def redact_text(text: str, homes: list[re.Pattern[str]], name: re.Pattern[str] | None, short: bool) -> str:
    for home in homes:
        text = home.sub("~", text)
    if name is None:
        return text
    if not short:
        return name.sub(USER, text)
    if name.fullmatch(text.strip()):  # the whole value is the name (a user field)
        return text.replace(text.strip(), USER)
    # "al" as a whole quoted string (a value inside JSON text), then path-like words
    text = re.sub(rf"([\"']){name.pattern}\1", rf"\1{USER}\1", text)
    return re.sub(r"\S+", lambda m: name.sub(USER, m[0]) if _PATHLIKE.search(m[0]) else m[0], text)


def _as_list(names: str | list[str]) -> list[str]:
    return [names] if isinstance(names, str) else names


def _host_tokens(hosts: list[str] | None) -> list[re.Pattern[str]]:
    """This machine's names of 3+ characters as tokens, longest first."""
    host_names = [h for h in dict.fromkeys(hosts or []) if len(h) >= 3 and h.lower() not in _GENERIC_HOSTS]
    # as written (host names are compared case-blind by DNS, but `Node` is also a word in messages)
    return [re.compile(_token(h).pattern) for h in sorted(host_names, key=len, reverse=True)]


def _walk(v: Any, text: Callable[[str], str]) -> Any:
    """v with text() applied to every string inside it (dict keys left as they are)."""
    if isinstance(v, str):
        return text(v)
    if isinstance(v, dict):
        return {k: _walk(x, text) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_walk(x, text) for x in v]
    return v


def redact(value: Any, home: str | list[str], user: str | list[str], hosts: list[str] | None = None) -> Any:
    """`value` with every string redacted (dict keys are our own fact names and stay as they are).

    `user`: the account name, or every name the user goes by (login, passwd entry, SUDO_USER); `hosts`: this
    machine's names (a short name of 3+ characters is redacted as a token, like a long user name)."""
    homes = [p for h in _as_list(home) if h and h != "/" if (p := _home(_nfc(h)))]
    users = [u for u in dict.fromkeys(_as_list(user)) if u and u not in _GENERIC]
    names = [(_token(u), len(u) <= SHORT) for u in sorted(users, key=len, reverse=True)]
    host_tokens = _host_tokens(hosts)

    def text(v: str) -> str:
        v = redact_text(_nfc(v), homes, None, False)
        for token in host_tokens:  # before names: a host like alice-ws holds the name
            v = token.sub(HOST, v)
        for name, short in names:
            v = redact_text(v, [], name, short)
        return v

    return _walk(value, text)
