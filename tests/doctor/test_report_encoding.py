"""A report file in the code page of the Windows console that wrote it (GBK, Shift-JIS, cp1252) reads as the text
it was, so full-width colons still separate GPU lines and localized OS names stay readable."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.report import load_report
from olmo_doctor.reports.encoding import decode

TEXTS = [
    ("Here\u2019s the \u201coutput\u201d \u2013 caf\u00e9\n", "cp1252"),
    ("M\u00fcller\u2019s r\u00e9sum\u00e9\n", "cp1252"),
    ("OS: Microsoft Windows 10 \u4e13\u4e1a\u7248\nGPU 0\uff1aNVIDIA\n", "gbk"),
    ("\u73af\u5883\u4fe1\u606f\u5982\u4e0b\uff1a\n", "gbk"),
    ("Windows 10 \u5bb6\u5ead\u4e2d\u6587\u7248\n", "gbk"),
    ("\u4f60\u597d\uff0c\u8fd9\u662f\u6211\u7684\u73af\u5883\n", "gbk"),
    ("OS: Microsoft Windows 11 Pro (10.0.22631 64 \u30d3\u30c3\u30c8)\n", "cp932"),
    ("GPU 0\uff1aNVIDIA H100\n", "cp932"),
    ("\u65e5\u672c\u8a9e\u306e\u74b0\u5883\u3067\u3059\n", "cp932"),
    ("OS: Ubuntu \u2014 caf\u00e9 \u4e13\u4e1a\u7248 \u30d3\u30c3\u30c8\n", "utf-8"),
    ("OS: Ubuntu\nGPU 0: NVIDIA H100\n", "utf-16"),
]


@pytest.mark.parametrize(("text", "codec"), TEXTS)
def test_decodes_to_the_written_text(text: str, codec: str) -> None:
    assert decode(text.encode(codec)) == text


@pytest.mark.parametrize(("codec", "os_name"), [("gbk", "Microsoft Windows 10 \u4e13\u4e1a\u7248"),
                                               ("cp932", "Microsoft Windows 11 Pro")])
def test_legacy_code_page_report(tmp_path: Path, codec: str, os_name: str) -> None:
    text = (f"PyTorch version: 2.4.1+cu124\r\nCUDA used to build PyTorch: 12.4\r\nOS: {os_name}\r\n"
            "Is CUDA available: True\r\nGPU models and configuration:\r\nGPU 0\uff1aNVIDIA H100 80GB HBM3\r\n"
            "GPU 1\uff1aNVIDIA H100 80GB HBM3\r\nNvidia driver version: 551.61\r\n")
    path = tmp_path / "report.txt"
    path.write_bytes(text.encode(codec))
    facts = load_report(path)
    assert facts["os.name"] == os_name and facts["gpu.count"] == 2 and facts["gpu.1.name"] == "NVIDIA H100 80GB HBM3"
