"""Text from data made inert for a rich console: paths, file names and values read from manifests, configs and
folders may hold control characters (ESC starts a terminal command: clear the screen, move the cursor up over a
warning, write the clipboard) and rich markup ("[/x]"). `inert` shows each control character as "?" and escapes
the markup, so the text prints as the characters it is and nothing else. Every data-derived string `olmo` prints
through rich goes through it (its one-line errors go through olmo_common.cli_errors.one_line)."""

from __future__ import annotations

import re

from rich.markup import escape

# C0 and C1 controls, DEL, the line and paragraph separators, bidirectional overrides, lone surrogates (a file
# name's bytes that are not UTF-8)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def inert(text: object) -> str:
    """`text` as rich markup that prints exactly its characters, each control character shown as "?"."""
    return escape(_CONTROL.sub("?", str(text)))


def plain(text: object) -> str:
    """`text` with each control character shown as "?", for output printed without markup."""
    return _CONTROL.sub("?", str(text))
