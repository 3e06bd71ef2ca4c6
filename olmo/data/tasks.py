"""The unit of prepare-data's work and what is done to it: a `Task` (whole lines of a JSON-lines file, a whole .txt
file, or values of a Parquet/Arrow text column) becomes an `Encoded` (each kept document's token ids, flat).

Per document, as `dolma tokens` does (dolma's python/dolma/tokenizer/tokenizer.py, `tokenize_file` and
`Tokenizer.add_special_tokens`), so that the same documents and tokenizer give the same ids:
- JSON is read strictly (no NaN/Infinity, no raw control characters); a line that is not a JSON object whose text
  field is a string is skipped and counted as bad, and so is one whose text holds a lone surrogate escape
  (`"\\ud800"`): that is not Unicode, and no tokenizer can take it (dolma skips it as malformed JSON);
- the text's surrounding whitespace is stripped (`str.strip()`), unless `strip` is off (--keep-whitespace);
- a document that is then empty, or that the tokenizer turns into no ids at all, is skipped and counted as empty;
- BOS (when one is asked for) is put first unless the ids already start with it, EOS last unless they already
  end with it (a text ending in the literal end-of-text token keeps just that one).

Every worker process imports this module: stdlib only (text_decode is stdlib too).
"""

from __future__ import annotations

import json
import time
from array import array
from typing import Any, NamedTuple

from olmo.data import text_decode

TYPECODES = {"uint16": "H", "uint32": "I"}
LINES, WHOLE, VALUES = "lines", "whole", "values"
PASSED_OVER = False  # a VALUES entry the reader did not materialise (over --max-doc-size; counted there)
AUTO = "auto"  # a WHOLE task's encoding: detect it (text_decode.whole_file_encoding)


class Task(NamedTuple):
    """A run of records of one input, the unit of work handed to an encoder."""

    file: int  # index into the input list
    kind: str  # LINES (bytes of whole JSON lines), WHOLE (a .txt file's bytes: one document), VALUES (a list)
    data: Any  # bytes, or for VALUES a list of str / bytes / None / PASSED_OVER
    first_line: int  # record number of the first record in `data` (line, or row, from 1)
    skip: int  # records up to this number were written by an earlier run (resume): pass over them
    nbytes: int = 0  # input-file bytes this task covers (compressed, for .gz): progress counts them once written
    encoding: str = text_decode.UTF8  # how to decode bytes in `data` (AUTO for a WHOLE task: detect)
    oversized: int = 0  # records over --max-doc-size the reader passed over (just before or inside this task)
    undecodable: int = 0  # bytes the reader could not decode while transcoding (UTF-16/32 lines)


class Encoded(NamedTuple):
    """A task's documents, each followed by EOS, as raw arrays (native byte order) plus per-file counts."""

    file: int
    ids: bytes  # the token ids of all documents, flat, in the shard dtype
    ends: bytes  # int64: each document's end offset in `ids`
    records: bytes  # int64: each document's record number (JSON line, row, or 1 for a .txt file)
    empty: int  # documents whose text is blank, or that encode to nothing
    bad: int  # records that are not JSON objects with a string text field (or hold a lone surrogate)
    first_bad: int  # record number of the first bad record, 0 when none
    cpu_s: float  # CPU seconds the encoding took (what the workers spend; see bench/prepare_data.py)
    nbytes: int = 0  # the task's input-file bytes (Task.nbytes), passed through
    first_bad_why: str = ""  # what was wrong with the first bad record
    undecodable: int = 0  # bytes that could not be decoded (each became U+FFFD)
    text_bytes: int = 0  # bytes decoded (the denominator of --max-undecodable)
    oversized: int = 0  # records over --max-doc-size (Task.oversized, passed through)
    encoding: str = ""  # the encoding a WHOLE task was decoded with ("" for other kinds)


class Parsed(NamedTuple):
    texts: list[str]
    records: list[int]
    empty: int
    bad: int
    first_bad: int
    first_bad_why: str
    undecodable: int
    text_bytes: int
    encoding: str


class Reading(NamedTuple):
    """How records become texts: the (dotted) text field, and whether surrounding whitespace is stripped."""

    field: tuple[str, ...] = ("text",)
    strip: bool = True


DEFAULT_READING = Reading()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(parse_constant=_reject_constant)  # strict=True: raw control characters in strings fail


class _Bad(Exception):
    """A record that is not a document (the message says why)."""


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _json_text(line: str, field: tuple[str, ...]) -> str:
    try:
        value: Any = _JSON.decode(line)
    except (ValueError, RecursionError):  # nested too deep is bad JSON too
        raise _Bad("not JSON") from None
    for key in field:
        if not isinstance(value, dict) or key not in value:
            raise _Bad(f"no '{'.'.join(field)}' field")
        value = value[key]
    if not isinstance(value, str):
        raise _Bad(f"'{'.'.join(field)}' is not a string")
    if ("\\ud" in line or "\\uD" in line) and _has_lone_surrogate(value):  # only an escape can make one
        raise _Bad("a lone surrogate escape (not Unicode)")
    return value


class _Collect:
    """Accumulates one task's documents and counts."""

    def __init__(self, reading: Reading):
        self.reading = reading
        self.texts: list[str] = []
        self.records: list[int] = []
        self.empty = self.bad = self.first_bad = 0
        self.why = ""

    def bad_record(self, n: int, why: str) -> None:
        self.bad += 1
        if not self.first_bad:
            self.first_bad, self.why = n, why

    def add(self, n: int, text: str) -> None:
        kept = text.strip() if self.reading.strip else text
        if not kept.strip():
            self.empty += 1
            return
        self.texts.append(kept)
        self.records.append(n)

    def parsed(self, undecodable: int, text_bytes: int, encoding: str = "") -> Parsed:
        return Parsed(self.texts, self.records, self.empty, self.bad, self.first_bad, self.why, undecodable,
                      text_bytes, encoding)


def _parse_lines(task: Task, collected: _Collect) -> Parsed:
    text, undecodable = text_decode.decode(task.data, task.encoding)
    for n, line in enumerate(text.split("\n"), task.first_line):
        if n <= task.skip or not line.strip():
            continue
        try:
            collected.add(n, _json_text(line, collected.reading.field))
        except _Bad as e:
            collected.bad_record(n, str(e))
    return collected.parsed(undecodable + task.undecodable, len(task.data))


def _parse_whole(task: Task, collected: _Collect) -> Parsed:
    data, encoding = task.data, task.encoding
    if encoding == AUTO:
        found = text_decode.bom(data)
        encoding, drop = found if found else (text_decode.whole_file_encoding(data), 0)
        data = data[drop:]
    text, undecodable = text_decode.decode(data, encoding)
    if not task.oversized:  # else the reader passed over the file: `data` is empty, and it is not a document
        collected.add(1, text)
    return collected.parsed(undecodable, len(data), encoding)


def _parse_values(task: Task, collected: _Collect) -> Parsed:
    undecodable = text_bytes = 0
    name = ".".join(collected.reading.field)
    for n, value in enumerate(task.data, task.first_line):
        if n <= task.skip or value is PASSED_OVER:
            continue
        if isinstance(value, bytes):  # a binary column: decoded like any other bytes
            text_bytes += len(value)
            value, bad = text_decode.decode(value, task.encoding)
            undecodable += bad
        if not isinstance(value, str):
            collected.bad_record(n, f"'{name}' is null")
            continue
        collected.add(n, value)
    return collected.parsed(undecodable, text_bytes)


_PARSERS = {LINES: _parse_lines, WHOLE: _parse_whole, VALUES: _parse_values}


def parse(task: Task, reading: Reading = DEFAULT_READING) -> Parsed:
    """The documents of a task (texts first, so `parse(task)[0]` is the list of texts) and its counts."""
    return _PARSERS[task.kind](task, _Collect(reading))


class Encoder:
    """Task -> Encoded with one loaded tokenizer (in a worker process, or in the main one)."""

    def __init__(self, tokenizer: Any, eos_id: int, dtype: str, reading: Reading = DEFAULT_READING,
                 bos_id: int | None = None):
        self.encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # no offsets: faster
        self.eos_id, self.bos_id, self.typecode, self.reading = eos_id, bos_id, TYPECODES[dtype], reading

    def __call__(self, task: Task) -> Encoded:
        t0 = time.process_time()
        p = parse(task, self.reading)
        ids, ends, records = array(self.typecode), array("q"), array("q")
        empty, eos, bos = p.empty, self.eos_id, self.bos_id
        # array.extend converts a list of ints in C; cheaper than numpy's fromiter over a chain of lists
        for enc, record in zip(self.encode(p.texts, add_special_tokens=False), p.records, strict=True):
            doc = enc.ids
            if not doc:  # a tokenizer whose normalizer removes every character: nothing to write (dolma: same)
                empty += 1
                continue
            if bos is not None and doc[0] != bos:
                ids.append(bos)
            ids.extend(doc)
            if doc[-1] != eos:
                ids.append(eos)
            ends.append(len(ids))
            records.append(record)
        return Encoded(task.file, ids.tobytes(), ends.tobytes(), records.tobytes(), empty, p.bad, p.first_bad,
                       time.process_time() - t0, task.nbytes, p.first_bad_why, p.undecodable, p.text_bytes,
                       task.oversized, p.encoding)
