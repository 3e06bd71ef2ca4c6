"""Per-input counts of one prepare-data run (or --dry-run), and the refusal of a file too badly decoded.

A file's undecodable bytes (each became U+FFFD, olmo/data/text_decode.py) are judged once the file is complete,
against `--max-undecodable` (a fraction of the bytes decoded, 0.1% by default): a few damaged bytes in a large
crawl pass with a warning, a file in another encoding read as UTF-8 (one in every few dozen bytes undecodable)
is refused in one line that says what to pass. The judgement uses the whole file's counts, so it is the same for
any number of workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from olmo.data.tasks import Encoded
from olmo.errors import ConfigError

DEFAULT_MAX_UNDECODABLE = 0.001


@dataclass
class FileStats:
    docs: int = 0
    empty: int = 0  # documents with no text (or that encode to nothing)
    bad: int = 0  # records that are not JSON objects with a string text field, or whose text is null
    first_bad_line: int | None = None
    first_bad_why: str = ""
    tokens: int = 0
    undecodable: int = 0  # bytes that could not be decoded (each became U+FFFD)
    text_bytes: int = 0  # bytes decoded
    oversized: int = 0  # records over --max-doc-size, passed over
    encoding: str = ""  # how a .txt file was decoded, when that was not UTF-8


def count(stats: dict[str, FileStats], inputs: list[Path], r: Encoded, docs: int, tokens: int) -> None:
    st = stats.setdefault(str(inputs[r.file]), FileStats())
    st.docs += docs
    st.tokens += tokens
    st.empty += r.empty
    st.bad += r.bad
    if r.first_bad and not st.first_bad_line:
        st.first_bad_line, st.first_bad_why = r.first_bad, r.first_bad_why
    st.undecodable += r.undecodable
    st.text_bytes += r.text_bytes
    st.oversized += r.oversized
    if r.encoding and r.encoding != "utf-8":
        st.encoding = r.encoding


def undecodable_share(st: FileStats) -> float:
    return st.undecodable / max(st.text_bytes, 1)


def check_decoding(path: str, st: FileStats | None, max_undecodable: float, encoding: str | None) -> None:
    """Refuse a finished file whose undecodable bytes are over the threshold."""
    if st is None or not st.undecodable or undecodable_share(st) <= max_undecodable:
        return
    used = encoding or st.encoding or "utf-8"
    hint = ("pass --encoding NAME if it is in another encoding (e.g. --encoding cp1252)" if not encoding
            else "check --encoding")
    raise ConfigError(f"input {path}: {st.undecodable:,} of its {st.text_bytes:,} bytes ("
                      f"{100 * undecodable_share(st):.2g}%) are not valid {used}, over --max-undecodable "
                      f"{100 * max_undecodable:g}%; {hint}, or raise --max-undecodable to keep them as U+FFFD")


class DecodingJudge:
    """Applies `check_decoding` to each input once it is complete (results of the next one are arriving)."""

    def __init__(self, stats: dict[str, FileStats], inputs: list[Path], max_undecodable: float, encoding: str | None):
        self.stats, self.inputs, self.current = stats, inputs, -1
        self.max_undecodable, self.encoding = max_undecodable, encoding

    def reading(self, file: int | None) -> None:
        """Results of input `file` are arriving (None: all are in)."""
        if file != self.current and self.current >= 0:
            path = str(self.inputs[self.current])
            check_decoding(path, self.stats.get(path), self.max_undecodable, self.encoding)
        self.current = -1 if file is None else file
