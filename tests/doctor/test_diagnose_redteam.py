"""Failure logs as people paste them, played against `olmo-doctor diagnose`: coloured, CRLF, UTF-16, quoted, and
with the machine's collect_env output pasted in the same file, whose facts must weigh in the ranking just as
`--report` does (an NCCL error on WSL2 is the WSL2 limitation)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmo_doctor.report import facts_in_log
from tests.helpers import run_cli

WSL2_REPORT = """PyTorch version: 2.5.1+cu124
Is debug build: False
CUDA used to build PyTorch: 12.4
OS: Ubuntu 22.04.5 LTS (x86_64)
Python version: 3.10.12 (main, Nov  6 2024, 20:22:13) [GCC 11.4.0] (64-bit runtime)
Python platform: Linux-5.15.167.4-microsoft-standard-WSL2-x86_64-with-glibc2.35
Is CUDA available: True
GPU models and configuration:
GPU 0: NVIDIA GeForce RTX 3090
GPU 1: NVIDIA GeForce RTX 3090

Nvidia driver version: 566.14
"""
NCCL = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n")
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 1.06 GiB is free.\n")
UNDEF = ("ImportError: /venv/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
         "undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE\n")
GCC = ("\x1b[1m\x1b[31mERROR:\x1b[0m Failed building wheel for flash-attn\n"
       "      \x1b[31merror: #error -- unsupported GNU version! gcc versions later than 12 are not supported!\x1b[0m\n")


def _diagnose(tmp_path: Path, data: bytes, *extra: str) -> tuple[int, list[str]]:
    log = tmp_path / "failure.log"
    log.write_bytes(data)
    res = run_cli("diagnose", str(log), "--json", *extra)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, [f["cause"] for f in json.loads(res.stdout)["findings"]]


@pytest.mark.parametrize(("name", "data", "cause"), [
    ("wsl2-report-then-nccl", (WSL2_REPORT + "\n" + NCCL).encode(), "nccl_wsl"),
    ("wsl2-report-quoted-crlf", "".join("> " + ln + "\r\n" for ln in (WSL2_REPORT + NCCL).splitlines()).encode(),
     "nccl_wsl"),
    ("nccl-alone", NCCL.encode(), "nccl_failure"),
    ("oom-utf16-crlf", OOM.replace("\n", "\r\n").encode("utf-16"), "out_of_memory_training"),
    ("report-then-undefined-symbol", (WSL2_REPORT + "\n" + UNDEF).encode(), "abi_undefined_symbol"),
    ("ansi-gcc-too-new", GCC.encode(), "unsupported_gcc"),
])
def test_log_names_its_root_cause(tmp_path: Path, name: str, data: bytes, cause: str) -> None:
    code, causes = _diagnose(tmp_path, data)
    assert code == 1 and causes[0] == cause


def test_facts_of_a_report_inside_a_log(tmp_path: Path) -> None:
    log = tmp_path / "issue.txt"
    log.write_text(WSL2_REPORT + "\n" + NCCL)
    facts = facts_in_log(log)
    assert facts["os.wsl"] is True and facts["gpu.count"] == 2
    log.write_text(NCCL)
    assert facts_in_log(log) == {}
    # a report that states the impossible does not steer the ranking, and diagnose still answers
    log.write_text(WSL2_REPORT.replace("GPU 1: NVIDIA GeForce RTX 3090", "") + "CPU(s): -3\n" + NCCL)
    assert facts_in_log(log) == {}
    assert _diagnose(tmp_path, log.read_bytes())[1][0] == "nccl_failure"


@pytest.mark.parametrize(("line", "cause"), [
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 63.98 GiB",
     "out_of_memory_training"),
    ("RuntimeError: MPS backend out of memory (MPS allocated: 17.53 GB, other allocations: 1.20 GB)",
     "out_of_memory_training"),
    ("      error: invalid command 'bdist_wheel'", "setuptools_pip"),
])
def test_more_wordings_of_known_causes(tmp_path: Path, line: str, cause: str) -> None:
    assert _diagnose(tmp_path, (line + "\n").encode())[1][:1] == [cause]
