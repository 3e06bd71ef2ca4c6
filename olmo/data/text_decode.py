"""Bytes to text for `olmo prepare-data`: which encoding a file is in, and how many of its bytes it cannot decode.

The rule, for every input:
- `--encoding NAME` given: that codec, for every file.
- otherwise a byte-order mark names the encoding (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE), and so does the NUL-byte
  pattern of UTF-16/32 text without one (the same test `json` applies to JSON text);
- otherwise UTF-8, the encoding JSON (RFC 8259 section 8.1), Parquet and Arrow text are defined in;
- except a whole-file document (.txt) that is not valid UTF-8 and looks like Western single-byte text: more of
  its non-ASCII bytes are undecodable as UTF-8 than decodable, they are under a third of the file (accented
  letters in a Latin-script language; CJK legacy encodings are mostly non-ASCII), and it has none of the five
  bytes cp1252 leaves undefined (0x81 0x8D 0x8F 0x90 0x9D, common in Shift-JIS or GBK). That is Latin-1 /
  Windows-1252, and it is read as cp1252 (the superset of Latin-1's printable characters such files are in
  practice) and said so. Anything else that is not UTF-8 (a UTF-8 file with a few damaged bytes, a CJK or
  Cyrillic legacy file) is read as UTF-8, its undecodable bytes counted, so --max-undecodable refuses it and
  the message asks for --encoding.

Bytes the chosen codec cannot decode become U+FFFD each and are counted, so prepare-data reports them per file
and refuses a file with more than `--max-undecodable` of them. Worker processes import this module: stdlib only.
"""

from __future__ import annotations

import codecs
import json
import re
import threading

UTF8 = "utf-8"
LEGACY = "cp1252"
ERRORS = "olmo-count-replace"
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, UTF8),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))  # UTF-32 LE before UTF-16 LE
# One well-formed multi-byte UTF-8 sequence (the Unicode standard's table 3-7).
_UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}|\xed[\x80-\x9f][\x80-\xbf]"
    rb"|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}")
_CP1252_UNDEFINED = (b"\x81", b"\x8d", b"\x8f", b"\x90", b"\x9d")
_count = threading.local()  # undecodable bytes seen by this thread's current `decode` call


def _count_and_replace(e: UnicodeError) -> tuple[str, int]:
    if not isinstance(e, UnicodeDecodeError):
        raise e
    _count.n += e.end - e.start
    return "\ufffd" * (e.end - e.start), e.end


codecs.register_error(ERRORS, _count_and_replace)


def check_codec(name: str) -> str:
    """The codec's canonical name; LookupError when Python has no such text encoding (rot13 and base64 are codecs,
    but not text encodings)."""
    info = codecs.lookup(name)
    if not getattr(info, "_is_text_encoding", True):
        raise LookupError(name)
    return info.name


def decode(data: bytes, encoding: str) -> tuple[str, int]:
    """`data` as text, each undecodable byte replaced by U+FFFD; and how many bytes that was."""
    try:
        return data.decode(encoding), 0  # the common case, at C speed
    except UnicodeDecodeError:
        pass
    _count.n = 0
    text = data.decode(encoding, ERRORS)
    return text, _count.n


def bom(head: bytes) -> tuple[str, int] | None:
    """(encoding, BOM length) when `head` starts with a byte-order mark."""
    return next(((name, len(mark)) for mark, name in _BOMS if head.startswith(mark)), None)


def sniff(head: bytes) -> tuple[str, int]:
    """The encoding the first bytes of a file show (a BOM, or UTF-16/32's NUL bytes), else UTF-8; and the number
    of BOM bytes to drop."""
    found = bom(head)
    if found:
        return found
    guess = json.detect_encoding(head[:4]) if len(head) >= 4 else UTF8
    return (UTF8 if guess in ("utf-8", "utf-8-sig") else guess), 0


def whole_file_encoding(data: bytes) -> str:
    """The encoding of a whole-file document without a BOM: UTF-8, unless it looks like a single-byte legacy file
    (see the module docstring)."""
    try:
        data.decode(UTF8)
        return UTF8
    except UnicodeDecodeError:
        pass
    decodable = sum(len(m.group()) for m in _UTF8_MULTIBYTE.finditer(data))
    non_ascii = len(data.translate(None, bytes(range(128))))  # the bytes left once the ASCII ones are deleted
    western = 3 * non_ascii < len(data) and not any(b in data for b in _CP1252_UNDEFINED)
    return LEGACY if western and non_ascii - decodable > decodable else UTF8


def decode_more(decoder: codecs.IncrementalDecoder, data: bytes, final: bool = False) -> tuple[str, int]:
    """`decode` for one piece of a stream, through an incremental decoder made with errors=ERRORS."""
    _count.n = 0
    text = decoder.decode(data, final)
    return text, _count.n


def ascii_compatible(encoding: str) -> bool:
    """True when the codec writes JSON's structural characters and the line break as the ASCII bytes (so lines can
    be cut on b"\\n" before decoding): UTF-8, Latin-1, cp1252, Shift-JIS; not UTF-16/32 or UTF-7."""
    probe = '\n{}[]",:\\ az09'
    try:
        return probe.encode(encoding) == probe.encode("ascii")
    except (UnicodeError, LookupError):
        return False
