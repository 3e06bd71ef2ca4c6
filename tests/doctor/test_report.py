"""Reports from other machines: the H200 capture gives the facts the issue names; garbage is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmo_doctor.api import run_check
from olmo_doctor.errors import UsageError
from olmo_doctor.report import load_report, parse_text, redact
from tests.machines import H200_CAPTURE

EXPECTED = {
    "gpu.0.name": "NVIDIA H200",
    "gpu.0.compute_capability": "9.0",
    "driver.version": "580.159.04",
    "torch.version": "2.11.0+cu130",
    "torch.cuda": "13.0",
    "gcc.version": "13.3.0",
    "glibc.version": "2.39",
    "python.version": "3.12.3",
}


def test_collect_env_alone_gives_the_named_facts() -> None:
    facts = parse_text((H200_CAPTURE / "collect_env.txt").read_text())
    for key, value in EXPECTED.items():
        if key != "gpu.0.compute_capability":  # derived from the name in load_report
            assert facts[key] == value, key
    assert facts["gpu.count"] == 1
    assert facts["nvcc.version"] == "13.0"  # collect_env's "CUDA runtime version" is the nvcc on PATH
    assert facts["torch.nccl"] == "2.28.9"


def test_h200_report_values_env_and_no_error(tmp_path: Path) -> None:
    # the collect_env file on its own (copied away from its capture folder)
    lone = tmp_path / "collect_env.txt"
    lone.write_text((H200_CAPTURE / "collect_env.txt").read_text())
    result = run_check(from_report=lone)
    for key, value in EXPECTED.items():
        assert result.facts[key] == value, key
    assert result.env["TORCH_CUDA_ARCH_LIST"].value == "9.0"
    assert result.env["FLASH_ATTN_CUDA_ARCHS"].value == "90"
    assert not result.errors, [f.code for f in result.errors]


def test_capture_folder_adds_memory_and_limits() -> None:
    facts = load_report(H200_CAPTURE / "collect_env.txt")  # siblings env.txt and torch.txt are read too
    assert facts["mem.total_gb"] == pytest.approx(135.1, abs=0.2)
    assert facts["cpu.count"] == 16
    assert facts["ulimit.nofile.soft"] == 20000
    assert facts["ulimit.memlock.soft"] == -1
    assert facts["torch.arch_list"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert facts["driver.cuda_version"] == "13.0"
    assert facts["libstdcxx.glibcxx_max"] == "3.4.33"
    assert facts["nvcc.max_gcc"] == 15
    assert facts["env.TORCH_CUDA_ARCH_LIST"] == "9.0a"
    result = run_check(from_report=H200_CAPTURE)
    assert result.env["MAX_JOBS"].value == "16"  # 16 CPUs, ~134 GB available


def test_driver_cuda_version_is_inferred_from_the_driver(tmp_path: Path) -> None:
    text = (H200_CAPTURE / "collect_env.txt").read_text().replace("580.159.04", "570.124.06")
    path = tmp_path / "collect_env.txt"
    path.write_text(text)
    assert load_report(path)["driver.cuda_version"] == "12.8"


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00\x01\x02" * 500, b"hello world\nthis is not a report\n", b'{"some": "json"}', b"\xff\xfe garbage"],
)
def test_garbage_is_refused_with_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(content)
    with pytest.raises(UsageError) as err:
        load_report(path)
    assert "\n" not in str(err.value)


def test_saved_report_round_trip(tmp_path: Path) -> None:
    facts = load_report(H200_CAPTURE)
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps({"olmo_doctor_report": 1, "facts": facts, "findings": []}))
    assert load_report(saved)["gpu.0.name"] == "NVIDIA H200"


def test_redact_hides_home_and_user() -> None:
    text = redact('{"python.executable": "/home/alice/venv/bin/python", "who": "alice"}', "/home/alice", "alice")
    assert "alice" not in text and "~/venv" in text
