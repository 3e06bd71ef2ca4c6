"""The diagnose engine on its own: reading any log, matching signatures line by line, ranking root causes.

Ranking tests use small made-up rules so they test the engine's logic, not the weights of the shipped rules.
"""

from __future__ import annotations

import codecs
import gzip
import io
from pathlib import Path
from typing import Any

import pytest

from olmo_doctor.diagnose import diagnose, diagnose_file, diagnose_text
from olmo_doctor.diagnose.reader import BLOCK, iter_chunks
from olmo_doctor.errors import UsageError
from olmo_doctor.rules.model import Rule, parse_rule


def rule(code: str, cause: str, sigs: list[tuple[str, float, str]], when: str | None = None,
         diagnose_table: dict[str, Any] | None = None) -> Rule:
    data: dict[str, Any] = {
        "code": code, "name": f"test-{code.lower()}", "cause": cause, "severity": "error",
        "title": f"{cause} title", "message": f"{cause} message", "sources": ["https://example.org"],
        "signature": [{"pattern": p, "weight": w, "role": r} for p, w, r in sigs],
    }
    if when:
        data["when"] = when
    if diagnose_table:
        data["diagnose"] = diagnose_table
    return parse_rule(data, Path(f"{code}-test.toml"))


OOM = rule("OD901", "compile_oom_killed", [("Killed signal terminated program cc1plus", 4.0, "cause")])
GCC = rule("OD902", "unsupported_gcc", [(r"error: command '\S*g\+\+' failed", 1.0, "symptom"),
                                        ("unsupported GNU version", 4.0, "cause")])
DISK = rule("OD903", "disk_space", [("No space left on device", 3.0, "cause")])
SHM = rule("OD904", "nccl_shm", [("posix_fallocate failed", 4.0, "cause")], when="num(shm.size_gb) < 1")
P2P = rule("OD905", "nccl_p2p", [("NCCL WARN .*timeout", 3.0, "cause")], when="gpu.nvlink == false")
RULES = (OOM, GCC, DISK, SHM, P2P)


def causes_of(text: str, facts: dict[str, Any] | None = None, rules: tuple[Rule, ...] = RULES) -> list[str]:
    return [f.cause for f in diagnose([text], facts, rules).findings]


# --- ranking ---------------------------------------------------------------------------------------------------

def test_root_beats_symptom() -> None:
    log = "[3/9] c++ -c big.cpp\nc++: fatal error: Killed signal terminated program cc1plus\n" \
          "error: command '/usr/bin/g++' failed with exit code 1\n"
    assert causes_of(log) == ["compile_oom_killed", "unsupported_gcc"]


def test_a_symptom_never_outranks_a_cause_even_with_more_weight() -> None:
    heavy_symptom = rule("OD906", "unsupported_gcc", [("build failed", 9.0, "symptom")])
    log = "No space left on device\nbuild failed\nbuild failed\n"
    assert causes_of(log, rules=(DISK, heavy_symptom)) == ["disk_space", "unsupported_gcc"]


def test_first_error_of_a_cascade_wins_between_equals() -> None:
    first = rule("OD907", "disk_space", [("alpha broke", 3.0, "cause")])
    second = rule("OD908", "ulimit_nofile", [("beta broke", 3.0, "cause")])
    assert causes_of("alpha broke\nbeta broke\n", rules=(first, second))[0] == "disk_space"
    assert causes_of("beta broke\nalpha broke\n", rules=(first, second))[0] == "ulimit_nofile"
    slightly_heavier = rule("OD913", "ulimit_nofile", [("beta broke", 3.3, "cause")])
    assert causes_of("alpha broke\nbeta broke\n", rules=(first, slightly_heavier))[0] == "disk_space"


def test_a_line_belongs_to_its_most_specific_signature() -> None:
    log = "NCCL WARN Call to posix_fallocate failed: No space left on device\n"
    assert causes_of(log) == ["nccl_shm"]


def test_facts_confirm_or_contradict_a_cause() -> None:
    log = "NCCL WARN Call to posix_fallocate failed\nNCCL WARN connection timeout\n"
    assert causes_of(log)[0] == "nccl_shm"
    flipped = causes_of(log, {"shm.size_gb": 64.0, "gpu.nvlink": False})  # shm is big, no NVLink: P2P it is
    assert flipped[0] == "nccl_p2p"


def test_facts_alone_come_after_log_evidence() -> None:
    findings = diagnose(["No space left on device\n"], {"shm.size_gb": 0.06}, RULES).findings
    assert [f.cause for f in findings] == ["disk_space", "nccl_shm"]
    assert findings[1].matched_lines == [] and (findings[1].confidence or 0) < (findings[0].confidence or 0)


def test_symptom_plus_facts_beats_symptom_alone() -> None:
    gcc_facts = rule("OD909", "unsupported_gcc", [], when="num(gcc.major) > 12")
    sym_only = rule("OD910", "disk_space", [("command failed", 1.0, "symptom")])
    log = "error: command '/usr/bin/g++' failed\ncommand failed\n"
    assert causes_of(log, {"gcc.major": 13}, rules=(GCC, gcc_facts, sym_only))[0] == "unsupported_gcc"


def test_one_finding_per_cause_and_named_groups_fill_the_title() -> None:
    titled = rule("OD911", "unsupported_gcc", [(r"gcc versions later than (?P<max_gcc>\d+)", 4.0, "cause")],
                  diagnose_table={"title": "nvcc accepts gcc <= {max_gcc}"})
    findings = diagnose(["gcc versions later than 12 are not supported\nunsupported GNU version\n"], None,
                        (GCC, titled)).findings
    assert [f.cause for f in findings] == ["unsupported_gcc"]
    assert findings[0].title == "nvcc accepts gcc <= 12"


def test_nothing_recognised_is_an_empty_list() -> None:
    assert diagnose_text("all good\nstep 10 loss 2.1\n") == []
    assert diagnose_text("") == []


# --- reading and matching ---------------------------------------------------------------------------------------

def test_wrapped_message_is_joined_across_two_lines() -> None:
    log = ("ImportError: flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined\n"
           " symbol: _ZN3c104cuda9SetDeviceEi\n")
    findings = diagnose_text(log)
    assert findings and findings[0].cause == "abi_undefined_symbol"
    assert findings[0].matched_lines[0].line == 1


def test_message_continued_on_the_next_line() -> None:
    assert causes_of(">>> torch.cuda.is_available()\nFalse\n", rules=(
        rule("OD912", "torch_cpu_build", [(r"torch\.cuda\.is_available\(\)\W*False", 3.0, "cause")]),)) == [
        "torch_cpu_build"]


@pytest.mark.parametrize("line", [
    "\x1b[31mc++: fatal error: Killed signal terminated program cc1plus\x1b[0m",
    "      │ c++: fatal error: Killed signal terminated program cc1plus",
    "#14 611.3   c++: fatal error: Killed signal terminated program cc1plus",
    "[1,0]<stderr>:c++: fatal error: Killed signal terminated program cc1plus",
    "Downloading 10%\rDownloading 50%\rc++: fatal error: Killed signal terminated program cc1plus\r",
])
def test_tool_prefixes_colours_and_progress_bars_are_tolerated(line: str, tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(f"noise\n{line}\nmore noise\n".encode())
    findings = diagnose(iter_chunks(log), None, RULES).findings
    assert findings and findings[0].cause == "compile_oom_killed"
    assert findings[0].matched_lines[0].line == 2
    assert findings[0].matched_lines[0].text.startswith("c++: fatal error")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "utf-16-le"])
def test_encodings(encoding: str, tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes("ok ✓\nc++: fatal error: Killed signal terminated program cc1plus\n".encode(encoding))
    assert causes_of_file(log) == ["compile_oom_killed"]


def causes_of_file(path: Path) -> list[str]:
    return [f.cause for f in diagnose(iter_chunks(path), None, RULES).findings]


def test_gzip_and_invalid_utf8(tmp_path: Path) -> None:
    log = tmp_path / "x.log.gz"
    log.write_bytes(gzip.compress(b"caf\xe9 \xff\nNo space left on device\n"))
    assert causes_of_file(log) == ["disk_space"]


def test_line_numbers_survive_chunk_boundaries(tmp_path: Path) -> None:
    filler = b"x" * 99 + b"\n"
    lines = BLOCK // len(filler) + 17
    log = tmp_path / "big.log"
    log.write_bytes(filler * lines + b"No space left on device\n" + filler * 3 + b"end without newline")
    diag = diagnose(iter_chunks(log), None, RULES)
    assert diag.findings[0].matched_lines[0].line == lines + 1
    assert diag.lines == lines + 5


def test_a_message_wrapped_over_a_chunk_boundary_is_found() -> None:
    chunks = [b"noise\nImportError: libfoo.so: undefined\n", b" symbol: _ZN3c104cuda9SetDeviceEi\nmore\n"]
    findings = diagnose(chunks).findings
    assert findings and findings[0].cause == "abi_undefined_symbol"
    assert findings[0].matched_lines[0].line == 2


@pytest.mark.parametrize(("data", "message"), [
    (b"", "is empty"),
    (b"   \n\n  \n", "is empty"),
    (bytes(range(256)) * 64, "binary"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(4000), "binary"),
])
def test_unreadable_input_is_one_clear_usage_error(data: bytes, message: str, tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    log.write_bytes(data)
    with pytest.raises(UsageError, match=message):
        diagnose_file(log)


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        diagnose_file(tmp_path / "nope.log")
    with pytest.raises(UsageError, match="folder"):
        diagnose_file(tmp_path)


def test_streams_are_accepted() -> None:
    stream = io.BytesIO(codecs.BOM_UTF8 + b"No space left on device\n")
    assert [f.cause for f in diagnose(iter_chunks(stream, "pipe"), None, RULES).findings] == ["disk_space"]


def test_error_lines_for_the_nothing_recognised_advice() -> None:
    from olmo_doctor.diagnose.output import error_lines

    text = "ok\nTraceback (most recent call last):\nValueError: odd\n" + "x\n" * 50 + "make: *** Error 2\n"
    assert error_lines(text) == [(3, "ValueError: odd"), (54, "make: *** Error 2")]
    assert error_lines(text, line0=101)[0] == (103, "ValueError: odd")  # a tail that starts further down
    assert error_lines("-Werror=format is on\nall fine\n") == []
