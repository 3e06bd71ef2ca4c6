"""Text decoding in prepare-data is explicit: the encoding is detected (BOM, UTF-8, a Western single-byte .txt read
as cp1252 and said so) or given (--encoding), undecodable bytes are counted per file by prepare-data and --dry-run
and refused in one line above --max-undecodable, and a JSON line with a lone surrogate escape is a counted bad
line, never a traceback.

The legacy-encoded texts are the family the Latin-1 corpus report belongs to: Western European text saved by
Windows tools (cp1252 smart quotes and dashes), ISO-8859-1 German and French, and the ones that must NOT be
guessed as cp1252 (Shift-JIS, GBK, Windows-1251 Cyrillic), which are refused with a pointer to --encoding.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from olmo.data.corpus import TOKENIZER_PATH
from olmo.data.prepare import load_tokenizer

CLI = Callable[..., tuple[int, str, str]]
FRENCH = "Café crème brûlée, naïve façade à l'hôtel. Où est la pâtisserie ? Élève, garçon, coeur."
GERMAN = "Die Straße ist schön. Müller aß Äpfel über dem Fluß, größer als Öl."
SMART = "He said “hello” – and ‘goodbye’… that’s all. Price: 5 € or £4."


def _ids(out: Path) -> list[int]:
    return np.concatenate([np.fromfile(p, dtype=np.uint16) for p in sorted(out.glob("part-*.npy"))]).tolist()


def _encode(text: str) -> list[int]:
    tok = load_tokenizer(TOKENIZER_PATH)
    return [*tok.encode([text.strip()])[0], tok.eos_id]


@pytest.mark.parametrize(("text", "codec"), [(FRENCH, "latin-1"), (GERMAN, "latin-1"), (SMART, "cp1252"),
                                             (FRENCH + SMART, "cp1252")])
def test_a_western_single_byte_txt_is_read_as_cp1252_and_said(tmp_path: Path, cli: CLI, text: str,
                                                              codec: str) -> None:
    (tmp_path / "doc.txt").write_bytes(text.encode(codec))
    code, out, err = cli("prepare-data", "-i", str(tmp_path / "doc.txt"), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 0, err
    assert "not UTF-8; read as cp1252" in err and "\ufffd" not in out + err
    assert _ids(tmp_path / "o") == _encode(text)  # the real characters, not replacement characters
    code, out, err = cli("prepare-data", "-i", str(tmp_path / "doc.txt"), "-o", str(tmp_path / "d"), "-t",
                         "bundled", "--dry-run")
    assert code == 0 and "cp1252" in out and "not UTF-8; read as cp1252" in err and not (tmp_path / "d").exists()


@pytest.mark.parametrize(("text", "codec"), [("日本語のテキストです。これはシフトJISの文章です。", "shift_jis"),
                                             ("中文文本，这是用GBK编码保存的一段文字。", "gbk"),
                                             ("Привет, это текст в кодировке Windows-1251.", "cp1251")])
def test_other_legacy_encodings_are_refused_with_what_to_pass(tmp_path: Path, cli: CLI, text: str,
                                                              codec: str) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_bytes(text.encode(codec))
    for extra in ([], ["--dry-run"]):
        code, _, err = cli("prepare-data", "-i", str(doc), "-o", str(tmp_path / "o"), "-t", "bundled", *extra)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "are not valid utf-8" in err and "--encoding" in err and "--max-undecodable" in err
        assert not (tmp_path / "o").exists()  # nothing half-written
    code, _, err = cli("prepare-data", "-i", str(doc), "-o", str(tmp_path / "o"), "-t", "bundled", "--encoding", codec)
    assert code == 0, err
    assert _ids(tmp_path / "o") == _encode(text)


def test_explicit_utf8_on_latin1_is_counted_and_refused(tmp_path: Path, cli: CLI) -> None:
    doc = tmp_path / "latin.txt"
    doc.write_bytes(FRENCH.encode("latin-1"))
    n_bad = sum(1 for c in FRENCH if ord(c) > 127)
    code, out, err = cli("prepare-data", "-i", str(doc), "-o", str(tmp_path / "o"), "-t", "bundled",
                         "--encoding", "utf-8", "--dry-run")
    assert code == 2 and f"{n_bad:,} of its {len(FRENCH.encode('latin-1')):,} bytes" in err
    row = next(line.split() for line in out.splitlines() if "latin.txt" in line)
    assert str(n_bad) in row  # the dry-run table counts them too
    code, _, err = cli("prepare-data", "-i", str(doc), "-o", str(tmp_path / "o"), "-t", "bundled",
                       "--encoding", "utf-8", "--max-undecodable", "100%")
    assert code == 0 and f"{n_bad} byte(s) could not be decoded and became U+FFFD" in err


def test_a_few_damaged_bytes_in_utf8_are_kept_and_reported(tmp_path: Path, cli: CLI) -> None:
    lines = [json.dumps({"text": f"Straße number {i}, café"}, ensure_ascii=False).encode() for i in range(3000)]
    lines[10] = lines[10].replace(b"number", b"num\xffber")  # one damaged byte in ~100 KB
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 0 and "1 byte(s) could not be decoded and became U+FFFD" in err
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "z"), "-t", "bundled",
                       "--max-undecodable", "0")
    assert code == 2 and "1 of its" in err and not (tmp_path / "z").exists()


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-8-sig"])
def test_byte_order_marks_name_the_encoding(tmp_path: Path, cli: CLI, codec: str) -> None:
    docs = [FRENCH, GERMAN, SMART, "日本語"]

    def encoded(text: str) -> bytes:  # Python's utf-16/utf-32 write a BOM; utf-16-be does not, so add one
        return "\ufeff".encode(codec) + text.encode(codec) if codec == "utf-16-be" else text.encode(codec)

    (tmp_path / "a.jsonl").write_bytes(encoded("\n".join(json.dumps({"text": d}, ensure_ascii=False) for d in docs)
                                               + "\n"))
    (tmp_path / "b.txt").write_bytes(encoded("  " + GERMAN + "\n"))
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl"), "-i", str(tmp_path / "b.txt"), "-o",
                       str(tmp_path / "o"), "-t", "bundled")
    assert code == 0 and "warning" not in err, err
    assert _ids(tmp_path / "o") == [t for d in [*docs, GERMAN] for t in _encode(d)]


def test_explicit_encoding_for_json_lines_and_gz(tmp_path: Path, cli: CLI) -> None:
    data = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in (FRENCH, GERMAN)).encode("latin-1")
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(data))
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl.gz"), "-o", str(tmp_path / "o"), "-t",
                       "bundled", "--encoding", "latin-1")
    assert code == 0, err
    assert _ids(tmp_path / "o") == _encode(FRENCH) + _encode(GERMAN)
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl.gz"), "-o", str(tmp_path / "x"), "-t",
                       "bundled")  # JSON is UTF-8 unless told: undecodable, refused
    assert code == 2 and "--encoding" in err


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\uD834", "a\\udc00b", "\\ud83d x \\ude00"])
def test_a_lone_surrogate_escape_is_a_counted_bad_line(tmp_path: Path, cli: CLI, escape: str) -> None:
    good = json.dumps({"text": "A good document."})
    (tmp_path / "a.jsonl").write_text(f'{good}\n{{"text": "bad {escape} one"}}\n{good}\n{{"text": "\\ud83d\\ude00"}}\n')
    for extra in ([], ["--workers", "2"]):
        out_dir = tmp_path / f"o{len(extra)}"
        code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl"), "-o", str(out_dir), "-t", "bundled", *extra)
        assert code == 0 and "Traceback" not in err, err
        assert "skipped 1 line(s)" in err and "line 2, a lone surrogate escape" in err
        assert _ids(out_dir) == _encode("A good document.") * 2 + _encode("😀")  # a valid pair is kept
    code, out, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "d"), "-t", "bundled",
                         "--dry-run")
    assert code == 1 and "unparseable" in out and "Traceback" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["--encoding", "klingon"], "--encoding 'klingon' is not a text encoding"),
    (["--encoding", "rot13"], "--encoding 'rot13' is not a text encoding"),
    (["--max-undecodable", "2"], "--max-undecodable '2' is not a share"),
    (["--max-undecodable", "lots"], "--max-undecodable 'lots' is not a share"),
    (["--max-doc-size", "12"], "--max-doc-size must be at least 1K"),
    (["--max-doc-size", "big"], "--max-doc-size 'big' is not a size"),
    (["--max-decompressed", "-5G"], "--max-decompressed must be at least 1K"),
    (["--text-field", "a..b"], "--text-field 'a..b' is not a field name"),
    (["--bos-token", "<nope>"], "no token '<nope>' for --bos-token"),
])
def test_option_errors_are_one_line(tmp_path: Path, cli: CLI, args: list[str], message: str) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "o"), "-t", "bundled",
                       *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()
