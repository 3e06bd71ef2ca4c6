"""`olmo-doctor build-kernels` end to end on the command line: plans from the captured H200, usage errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import has_nvidia_smi_gpu, run_cli

from tests.machines import H200_CAPTURE

FIXTURE = H200_CAPTURE / "collect_env.txt"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("build-kernels", *args)


def test_dry_run_json_from_the_h200_report() -> None:
    proc = _cli("--from-report", str(FIXTURE), "--dry-run", "--json", "--package", "all", "--subset", "olmo")
    assert proc.returncode == 0, proc.stderr
    fa, xf = json.loads(proc.stdout)["plans"]
    assert fa["archs"] == ["90"] and fa["env"]["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert fa["translation_units"] == 7 and fa["compile_jobs"] == 12 and fa["max_jobs"] == 12
    assert fa["split_branches"] and fa["version"].endswith("+olmo.hd128.bf16")
    assert fa["jobs_sizing"]["cpus"] == 16 and fa["jobs_sizing"]["memory_gb"] > 120
    assert xf["subset"] is None and xf["env"]["TORCH_CUDA_ARCH_LIST"] == "9.0a" and xf["max_jobs"] == 13
    full = json.loads(_cli("--from-report", str(FIXTURE), "--json").stdout)["plans"][0]  # report => dry run
    assert full["max_jobs"] == 16 and full["translation_units"] == 73


def test_text_plan_shows_the_command() -> None:
    proc = _cli("--from-report", str(FIXTURE), "--subset", "olmo")
    assert proc.returncode == 0
    assert "FLASH_ATTN_CUDA_ARCHS=90" in proc.stdout and "pip wheel -v --no-build-isolation" in proc.stdout
    assert "7 translation units" in proc.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    not_report = tmp_path / "x.txt"
    not_report.write_text("hello\n")
    for args, needle in (
        (("--subset", "llama", "--from-report", str(FIXTURE)), "unknown subset 'llama'"),
        (
            ("--package", "xformers", "--subset", "olmo", "--from-report", str(FIXTURE)),
            "unknown subset 'olmo'",
        ),
        (("--version", "1.0.0", "--from-report", str(FIXTURE)), "no recipe pins flash-attn==1.0.0"),
        (("--source", str(tmp_path / "nope")), "no such file or folder"),
        (("--package", "flash-attn-3", "--from-report", str(FIXTURE)), "has no sdist on PyPI; pass --source"),
        (("--from-report", str(not_report)), "report"),
    ):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(has_nvidia_smi_gpu(), reason="on a GPU machine this would start a real build")
def test_machine_without_gpu_is_refused_without_compiling() -> None:
    plan = json.loads(_cli("--dry-run", "--json").stdout)["plans"][0]
    assert plan["ok"] is False and "BK001" in [b["code"] for b in plan["blockers"]]
    proc = _cli("--json", "--package", "all")
    assert proc.returncode == 1
    results = json.loads(proc.stdout)["results"]
    assert [r["status"] for r in results] == ["refused", "refused"]
    assert all("BK001" in [b["code"] for b in r["blockers"]] for r in results)
