"""A real fleet on this CPU machine: 4 processes joined over gloo, each "node" replaying a report instead of
probing (OLMO_DOCTOR_FLEET_REPORT per rank), the facts gathered to rank 0, the all-reduces timed over gloo.
Slow (each process imports torch): marked slow."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from tests.helpers import FIXTURES, ROOT

FLEET = FIXTURES / "fleet"
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(n: int, *args: str, reports: list[Path] | None = None, timeout: float = 120) -> list[Any]:
    """Start n ranks as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*), one fake node each."""
    port = free_port()
    procs = []
    for rank in range(n):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OLMO_DOCTOR_NODE_NAME": f"node{rank}",
               "PYTHONPATH": str(ROOT)}
        if reports is not None:
            env["OLMO_DOCTOR_FLEET_REPORT"] = str(reports[rank])
        procs.append(subprocess.Popen([sys.executable, "-m", "olmo_doctor", "check", "--fleet", *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=timeout)
        out.append((p.returncode, stdout, stderr))
    return out


def test_four_node_gloo_fleet_names_the_odd_node_and_matches_compare() -> None:
    reports = [FLEET / f"node{i}.json" for i in range(4)]
    results = launch(4, "--json", "--scope", "train", "--fleet-size-mb", "1", reports=reports)
    code, stdout, stderr = results[0]
    assert code == 1, stderr[-2000:]
    assert all(r[1] == "" for r in results[1:])  # only rank 0 prints
    data = json.loads(stdout)
    strict = [(r["key"], r["odd"]) for r in data["table"] if r["strict"] and not r["agrees"]]
    assert strict == [("torch.version", ["node2"])]
    assert data["facts"]["fleet.odd"] == [
        "torch.version: node2 (2.10.0+cu128) differs from the others (2.11.0+cu130)"]
    assert {n: [f["code"] for f in fs] for n, fs in data["health"].items()} == {
        "node0": [], "node1": ["OD310"], "node2": [], "node3": ["OD300", "OD301"]}
    tests = {t["name"]: t for t in data["allreduce"]}
    assert set(tests) == {"all 4 ranks", *(f"node{a} <-> node{b}" for a in range(4) for b in range(a + 1, 4))}
    assert all(t["backend"] == "gloo" and t["busbw_gbps"] > 0 and not t["error"] for t in tests.values())
    # compare: the same table and verdict from the same reports
    res = CliRunner().invoke(app, ["compare", *map(str, reports), "--json", "--scope", "train"])
    saved = json.loads(res.stdout)
    assert saved["table"] == data["table"]
    assert [f["code"] for f in saved["findings"]] == [f["code"] for f in data["findings"]] == ["OD330", "OD331"]
    assert saved["health"] == data["health"]


def test_a_collective_past_its_timeout_is_reported_as_hung() -> None:
    reports = [FLEET / "node0.json", FLEET / "node0.json"]
    results = launch(2, "--json", "--fleet-timeout", "1", "--fleet-size-mb", "512", reports=reports)
    code, stdout, stderr = results[0]
    assert code == 1, stderr[-2000:]
    data = json.loads(stdout)
    assert data["facts"]["fleet.hang"] == ["all 2 ranks"]
    assert "OD333" in [f["code"] for f in data["findings"]]
    assert all(r[0] != 0 for r in results)


def test_a_node_without_its_report_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "node0.json").write_bytes((FLEET / "node0.json").read_bytes())  # node1 has none
    results = launch(2, "--fleet-facts-from", str(tmp_path))
    code, stdout, stderr = results[0]
    assert code == 2 and stdout == "" and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("olmo-doctor: node node1:")
    assert results[1][0] == 2 and "Traceback" not in results[1][2]
