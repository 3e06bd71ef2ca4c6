"""Attacks through text encodings on prepare-data: a UTF-16 file (with its BOM), a JSON-lines file starting with
a UTF-8 BOM (which would make its first line unparseable and silently drop it), and a GBK file read as UTF-8
(every CJK character would become U+FFFD and be trained on). Each must be decoded right or refused in one line
with nothing written. Sources: Windows editors (Notepad's "Unicode" is UTF-16LE with a BOM; "UTF-8 with BOM"),
Chinese corpora in GBK, and the bad-input report's latin-1 corpus tokenized as replacement characters.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

Cli = Callable[..., tuple[int, str]]
TEXT = "Café crème brûlée, naïve façade. " * 40


def _tokens(out: Path) -> np.ndarray:
    """The token ids of a prepared folder (its shards are raw arrays of the manifest's dtype)."""
    dtype = json.loads((out / "manifest.json").read_text())["dtype"]
    return np.concatenate([np.fromfile(p, dtype=dtype) for p in sorted(out.glob("part-*.npy"))])


def test_a_utf16_file_is_decoded_not_tokenized_as_bytes(tmp_path: Path, olmo_cli: Cli) -> None:
    (tmp_path / "u16").mkdir()
    (tmp_path / "u16" / "a.txt").write_bytes((TEXT + "\n").encode("utf-16"))
    (tmp_path / "u8").mkdir()
    (tmp_path / "u8" / "a.txt").write_text(TEXT + "\n", encoding="utf-8")
    for name in ("u16", "u8"):
        code, err = olmo_cli("prepare-data", "-i", str(tmp_path / name), "-o", str(tmp_path / f"out-{name}"), "-t",
                             "bundled")
        assert code == 0, err
    assert np.array_equal(_tokens(tmp_path / "out-u16"), _tokens(tmp_path / "out-u8"))


def test_a_bom_never_costs_the_first_document(tmp_path: Path, olmo_cli: Cli) -> None:
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"text": f"hello world number {i}"}) for i in range(50)]
    (tmp_path / "in" / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    code, err = olmo_cli("prepare-data", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-t", "bundled")
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sum(s["num_docs"] for s in manifest["shards"]) == 50, manifest["shards"]


def test_gbk_read_as_utf8_is_refused_with_nothing_written(tmp_path: Path, olmo_cli: Cli) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes(("中文文本测试，这是一个句子。" * 30 + "\n").encode("gbk"))
    code, err = olmo_cli("prepare-data", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-t", "bundled")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "--encoding" in lines[0], err
    assert not (tmp_path / "out").exists()
