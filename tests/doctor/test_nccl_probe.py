"""The all-reduce probe runs for real on CPU through torchrun with gloo (2 processes); its facts feed the rules."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from olmo_doctor.facts import FactValue
from olmo_doctor.nccl.probe import link_between_gpus, run_allreduce
from olmo_doctor.rules.engine import run_rules
from olmo_doctor.run import FakeRunner


@pytest.mark.slow
def test_gloo_allreduce_two_processes_measures_and_checks_sums() -> None:
    facts = run_allreduce(2, backend="gloo", sizes_mb="1,4", timeout=120)
    assert facts["nccl.hang"] is False and facts["nccl.error"] is None, facts.get("nccl.log")
    assert facts["nccl.correct"] is True
    assert isinstance(facts["nccl.busbw_gbps"], float) and facts["nccl.busbw_gbps"] > 0
    assert facts["nccl.size_mb"] == 4


def test_a_hang_becomes_a_finding(tmp_path: Path) -> None:
    # a real hang, whatever the machine's speed: rank 1 never reaches the collective, so rank 0 waits for it
    stuck = tmp_path / "rank1.pid"
    (tmp_path / "sitecustomize.py").write_text(
        f'import os, time\nif os.environ.get("RANK") == "1":\n    open({str(stuck)!r}, "w").write(str(os.getpid()))\n'
        '    time.sleep(3600)\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    facts = run_allreduce(2, backend="gloo", sizes_mb="1", timeout=5, env=env)
    assert facts["nccl.hang"] is True
    if stuck.exists():  # the stuck rank (torchrun starts it in a session of its own) was ended with the rest
        pid = int(stuck.read_text())
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    codes = {f.code for f in run_rules({**facts, "gpu.count": 2}, scope="train")}
    assert "OD010" in codes


def test_link_peak_from_topology() -> None:
    topo = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"
    assert link_between_gpus(FakeRunner({"nvidia-smi topo -m": topo})) == ("NV18", 450.0)
    pcie = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n"
    query = "nvidia-smi --query-gpu=pcie.link.gen.max,pcie.link.width.max --format=csv,noheader"
    runner = FakeRunner({"nvidia-smi topo -m": pcie, query: "4, 16\n"})
    assert link_between_gpus(runner) == ("PHB", 31.5)


def test_slow_allreduce_is_flagged_with_numbers() -> None:
    facts: dict[str, FactValue] = {"nccl.efficiency": 0.1, "nccl.busbw_gbps": 45.0, "nccl.link": "NV18",
                                   "nccl.link_peak_gbps": 450.0, "nccl.size_mb": 2048, "nccl.world": 2}
    finding = next(f for f in run_rules(facts, scope="train") if f.code == "OD012")
    assert "10%" in finding.message and "45.0 GB/s" in finding.title
