"""What every `olmo` command shares: the consoles it prints on, the `--json` flag and count parsing."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from olmo.errors import OlmoError

# --json on the commands a script runs (olmo/cli/jsonout.py): one object on stdout, made in olmo/cli/summaries.py
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (the summary) and nothing "
                                        "else there; logs go to stderr.")]
out = Console(highlight=False, soft_wrap=True)  # log lines stay whole in files and pipes
err = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_count(text: str) -> int:
    """'256M' -> 256_000_000; K, M, G (or B) are powers of 1000."""
    t = text.strip().upper().replace("_", "").replace(",", "")
    mult = {"K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except (ValueError, OverflowError):  # OverflowError: inf, or a number past float's range
        raise OlmoError(f"'{text}' is not a count; use e.g. 256M or 1000000") from None
    if n <= 0:
        raise OlmoError(f"the count must be positive (got {text})")
    return n
