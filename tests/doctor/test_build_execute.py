"""The executor on a real subprocess that behaves like a ninja build: progress, log, peak RSS, failures."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from olmo_doctor.build import execute
from olmo_doctor.build.plan import BuildRequest, plan_build
from olmo_doctor.build.recipes import find_recipe
from tests.machines import H200


def test_parse_progress_reads_ninja_status_lines() -> None:
    lines = [
        "  running build_ext",
        "  [1/7] c++ -MMD -MF /w/flash_api.o.d -O3 -c /w/csrc/flash_attn/flash_api.cpp -o /w/flash_api.o",
        "  [2/7] /usr/local/cuda/bin/nvcc --generate-dependencies -c -c /w/flash_bwd_x.cu -o b.o",
        "[10/73] nvcc something else",
        "ninja: build stopped: subcommand failed.",
    ]
    assert list(execute.parse_progress(lines)) == [
        (1, 7, "flash_api.cpp"),
        (2, 7, "flash_bwd_x.cu"),
        (10, 73, "nvcc something else"),
    ]


FAKE_BUILD = textwrap.dedent("""
    import os, sys, subprocess, time
    wheel_dir, ok = sys.argv[1], sys.argv[2] == "ok"
    # a child holding ~300 MB, like an nvcc job, so the sampler must look at the whole process tree
    child = subprocess.Popen([sys.executable, "-c",
        "import time; b = bytearray(300_000_000); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"])
    print("  Running command python setup.py bdist_wheel", flush=True)
    print("  Emitting ninja build file /b/build.ninja...", flush=True)
    for i in (1, 2, 3):
        print(f"  [{i}/3] nvcc -c /src/unit{i}.cu -o unit{i}.o", flush=True)
        time.sleep(0.3)
    child.wait()
    if not ok:
        print("FAILED: /b/unit3.o")
        print("/src/unit3.cu:1:10: fatal error: cute/tensor.hpp: No such file or directory")
        print("ninja: build stopped: subcommand failed.")
        sys.exit(1)
    print("  Building wheel for flash-attn (setup.py): finished with status 'done'")
    open(os.path.join(wheel_dir, "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl"), "wb").write(b"PK")
""")


def _plan(tmp_path: Path, outcome: str):
    plan = plan_build(H200, find_recipe("flash-attn"), BuildRequest(package="flash-attn", work_root=str(tmp_path)))
    Path(plan.wheel_dir).mkdir(parents=True)
    script = tmp_path / "fake_build.py"
    script.write_text(FAKE_BUILD)
    plan.argv = [sys.executable, str(script), plan.wheel_dir, outcome]
    return plan


def test_run_plan_success_streams_progress_log_and_peak_rss(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "ok")
    seen: list[str] = []
    with (tmp_path / "console.txt").open("w") as out:
        console = Console(file=out, force_terminal=False)
        res = execute.run_plan(plan, tmp_path / "logs" / "b.log", console, on_line=seen.append)
    assert res.ok and res.returncode == 0
    assert (res.steps_done, res.steps_total) == (3, 3)
    assert res.wheel is not None and res.wheel.name.startswith("flash_attn-2.8.3.post2")
    assert res.peak_rss_gb > 0.29  # the 300 MB child was counted
    log = res.log_path.read_text()
    assert "[2/3] nvcc -c /src/unit2.cu" in log and "FLASH_ATTN_CUDA_ARCHS" in log and "returncode 0" in log
    assert len(seen) >= 4
    assert "[3/3] unit3.cu" in (tmp_path / "console.txt").read_text()  # non-terminal: one line per step
    events = [e for _, e in res.timeline]
    assert events == ["bdist_wheel starts", "ninja starts", "[1/3] unit1.cu", "[2/3] unit2.cu", "[3/3] unit3.cu"]
    times = [t for t, _ in res.timeline]
    assert times == sorted(times) and times[-1] - times[1] >= 0.5  # the steps were 0.3 s apart


def test_failure_without_diagnose_points_at_the_first_failed_block(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "olmo_doctor.diagnose", None)  # branch not merged: import fails
    with open(os.devnull, "w") as null:
        res = execute.run_plan(_plan(tmp_path, "fail"), tmp_path / "b.log", Console(file=null))
    assert not res.ok and res.returncode == 1 and res.wheel is None
    verdict = execute.explain_failure(res.log_path)
    assert verdict["source"] == "log"
    assert verdict["message"].startswith("FAILED: /b/unit3.o") and "cute/tensor.hpp" in verdict["message"]


def test_failure_with_diagnose_prints_its_verdict(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("FAILED: x\n/src/flash_fwd.cu:1:10: fatal error: cute/tensor.hpp: No such file or directory\n")
    verdict = execute.explain_failure(log)
    assert verdict["source"] == "diagnose" and "git submodule update --init csrc/cutlass" in " ".join(verdict["fixes"])


def test_a_failure_diagnose_only_half_recognises_quotes_the_log_instead(tmp_path: Path) -> None:
    """`egg_info did not run successfully` follows every failed setup.py; alone it must not name a cause (it
    once blamed build isolation for a missing ../README.md). The Python exception and its frame are quoted."""
    log = tmp_path / "b.log"
    log.write_text(
        "  Running command python setup.py egg_info\n"
        "  Traceback (most recent call last):\n"
        '    File "/b/src/hopper/setup.py", line 29, in <module>\n'
        '      with open("../README.md", "r", encoding="utf-8") as fh:\n'
        "  FileNotFoundError: [Errno 2] No such file or directory: '../README.md'\n"
        "  error: subprocess-exited-with-error\n"
        "  × python setup.py egg_info did not run successfully.\n"
        "error: metadata-generation-failed\n"
    )
    verdict = execute.explain_failure(log)
    assert verdict["source"] == "log" and verdict["fixes"] == []
    assert verdict["message"].splitlines()[-1].strip().startswith("FileNotFoundError: [Errno 2]")
    assert "setup.py\", line 29" in verdict["message"]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a\nb\nc: error: boom\nd\n", "c: error: boom"),
        ("x\ny\n", "x"),
    ],
)
def test_first_error(tmp_path: Path, text: str, expected: str) -> None:
    log = tmp_path / "l.log"
    log.write_text(text)
    assert execute.first_error(log).splitlines()[0] == expected
