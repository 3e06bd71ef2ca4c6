"""URLs where a local path belongs: both command lines read and write local (or mounted) paths only.

pathlib turns `s3://bucket/run` into `s3:/bucket/run`, a relative folder named `s3:`: written to, it would
create that folder; read, it says "no such file" about a path the user never typed. So a URL is named as one,
before anything else happens. `URL_RE` matches both spellings (before and after pathlib).
"""

from __future__ import annotations

import re

# any scheme of two letters or more (not a drive letter); one slash is enough: pathlib turns "s3://b" into "s3:/b"
URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")
_RAW_URL = re.compile(r"^(?:--?[A-Za-z][\w-]*=)?([A-Za-z][A-Za-z0-9+.-]+://\S*)")


def url_in(args: list[str]) -> str | None:
    """The first command-line word that is a URL (`s3://b/x`, or an option's `--out=https://...`), if any."""
    for arg in args:
        if arg == "--":
            break
        found = _RAW_URL.match(arg)
        if found:
            return found.group(1)
    return None
