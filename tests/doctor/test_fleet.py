"""The fleet verdict without a fleet: the cross-node table, link judgement, test planning, the launcher's
environment, and `compare` through the real CLI (reports in tests/fixtures/fleet: node2 runs another torch,
node3 has recorded ECC errors and a pending row remap, node1 an RDMA port down)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.errors import UsageError
from olmo_doctor.fleet import links, table, world
from olmo_doctor.fleet.plan import pair_rounds, plan_tests
from olmo_doctor.fleet.verdict import judge
from olmo_doctor.report import load_report
from tests.helpers import FIXTURES

FLEET = FIXTURES / "fleet"
runner = CliRunner()


def nodes() -> dict[str, Any]:
    return {p.stem: load_report(p) for p in sorted(FLEET.glob("*.json"))}


def test_table_names_the_odd_node_and_fact() -> None:
    rows = {r.key: r for r in table.build(nodes())}
    assert rows["torch.version"].odd == ["node2"] and rows["torch.version"].majority == "2.11.0+cu130"
    assert rows["torch.version"].strict
    assert rows["ib.active_ports"].odd == ["node1"] and not rows["ib.active_ports"].strict
    assert rows["gpu.model"].values["node0"] == "2x NVIDIA H200" and rows["gpu.model"].agrees
    odd = [k for k, r in rows.items() if not r.agrees]
    assert sorted(odd) == ["ib.active_ports", "ib.active_rate_gbps", "torch.version"]


def test_no_majority_blames_nobody_and_missing_counts_as_a_value() -> None:
    r = table.row("driver.version", "driver", True, {"a": "580.65.06", "b": "575.57.08"})
    assert r.odd == ["a", "b"] and r.majority is None
    assert "no majority" in table.describe(r)
    r = table.row("flash_attn.version", "fa", True, {"a": "2.8.3", "b": "2.8.3", "c": None})
    assert r.odd == ["c"] and r.majority == "2.8.3"
    assert table.describe(r) == "flash_attn.version: c (-) differs from the others (2.8.3)"
    mixed = table.derived({"gpu.count": 3, "gpu.0.name": "NVIDIA H100", "gpu.1.name": "NVIDIA H100",
                           "gpu.2.name": "NVIDIA A100"})
    assert mixed["gpu.model"] == "2x NVIDIA H100, 1x NVIDIA A100"


def test_verdict_from_reports() -> None:
    result = judge(nodes(), scope="train", source="reports")
    assert result.facts["fleet.odd"] == ["torch.version: node2 (2.10.0+cu128) differs from the others (2.11.0+cu130)"]
    assert {f.code for f in result.findings} == {"OD330", "OD331"}
    assert {f.code for f in result.health["node3"]} >= {"OD300", "OD301"}
    assert {f.code for f in result.health["node1"]} == {"OD310"}
    assert not result.health["node0"] and result.exit_code == 1
    same = {n: f for n, f in nodes().items() if n != "node2"}
    same["node3"] = same["node0"]
    assert judge(same, scope="train").exit_code == 0


def t(kind: str, nodes_: list[str], busbw: float | None, ranks: int = 2, **kw: Any) -> links.Test:
    return links.Test(kind, nodes_, ranks, backend="nccl", size_mb=256, busbw_gbps=busbw, **kw)


def test_slow_node_is_named_from_its_pairs_and_a_lone_slow_pair_is_a_link() -> None:
    names = ["a", "b", "c", "d"]
    tests = [t("pair", [x, y], 5.0 if "c" in (x, y) else 40.0) for x, y in itertools.combinations(names, 2)]
    links.judge(tests)
    assert links.slow_nodes(tests) == ["c"]
    lines = links.findings_lines(tests)
    assert len(lines) == 1 and lines[0].startswith("node c:")
    tests = [t("pair", [x, y], 5.0 if (x, y) == ("a", "b") else 40.0) for x, y in itertools.combinations(names, 2)]
    links.judge(tests)
    assert links.slow_nodes(tests) == [] and links.findings_lines(tests)[0].startswith("a <-> b:")


def test_expectation_from_nvlink_and_rdma() -> None:
    facts = nodes()
    inside = t("node", ["node0"], 40.0)
    between = t("pair", ["node0", "node1"], 45.0)
    links.expect(inside, facts, {"node0": 2, "node1": 2})
    links.expect(between, facts, {"node0": 2, "node1": 2})
    assert inside.expected_gbps == 450.0 and inside.link == "NVLink x18"
    assert between.expected_gbps == 25.0  # node1 has one 400 Gb/s port up for its 2 ranks
    links.judge([inside, between])
    assert inside.slow and "9%" in inside.slow and not between.slow
    cpu = links.Test("all", ["node0"], 2, backend="gloo", busbw_gbps=0.4)
    links.expect(cpu, facts, {"node0": 2})
    assert cpu.expected_gbps is None


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_pair_rounds_cover_every_pair_once_with_disjoint_rounds(n: int) -> None:
    names = [f"n{i}" for i in range(n)]
    rounds = pair_rounds(names)
    seen = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, seen)) == sorted(map(sorted, map(frozenset, itertools.combinations(names, 2))))
    for r in rounds:
        used = [x for p in r for x in p]
        assert len(used) == len(set(used))


def test_pair_rounds_for_many_nodes_put_each_node_in_two_pairs() -> None:
    names = [f"n{i}" for i in range(11)]
    count = {n: 0 for n in names}
    for r in pair_rounds(names):
        for a, b in r:
            count[a] += 1
            count[b] += 1
    assert min(count.values()) >= 2


def test_plan_uses_disjoint_ranks_per_round() -> None:
    ranks_of = {"a": [0, 1], "b": [2, 3], "c": [4, 5]}
    rounds = plan_tests(["a", "b", "c"], ranks_of, 6)
    assert [t.name for t, _ in rounds[0]] == ["all 6 ranks"]
    assert [t.name for t, _ in rounds[1]] == ["within a", "within b", "within c"]
    assert sorted(t.name for r in rounds[2:] for t, _ in r) == ["a <-> b", "a <-> c", "b <-> c"]
    for r in rounds:
        used = [x for _, ranks in r for x in ranks]
        assert len(used) == len(set(used))


def test_place_from_torchrun_and_srun() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1",
           "OLMO_DOCTOR_NODE_NAME": "sim{rank}-{local_rank}"}
    assert world.place(env) == world.Place(3, 4, 1, "sim3-1")
    assert world.first_host("gpu[003-005,9],login1") == "gpu003" and world.first_host("a1,b2") == "a1"
    with pytest.raises(UsageError, match="launcher"):
        world.place({})
    with pytest.raises(UsageError, match="not a non-negative integer"):
        world.place({"RANK": "0; rm -rf /", "WORLD_SIZE": "2"})
    with pytest.raises(UsageError, match="does not fit"):
        world.place({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"})


def test_node_names_are_data_never_paths_or_format_strings(tmp_path: Path) -> None:
    for raw in ("../../etc/passwd", "/tmp/x", "{rank.__class__}", "a b;c"):
        name = world.node_name({"OLMO_DOCTOR_NODE_NAME": raw}, 0, 0)
        assert "/" not in name and not name.startswith(".") and " " not in name and ";" not in name
        assert (tmp_path / f"{name}.json").resolve().parent == tmp_path.resolve()


def test_compare_cli_json_matches_the_table() -> None:
    res = runner.invoke(app, ["compare", *map(str, sorted(FLEET.glob("*.json"))), "--json", "--scope", "train"])
    assert res.exit_code == 1, res.output
    data = json.loads(res.stdout)
    odd = [r for r in data["table"] if not r["agrees"]]
    assert [(r["key"], r["odd"]) for r in odd if r["strict"]] == [("torch.version", ["node2"])]
    assert [f["code"] for f in data["findings"]] == ["OD330", "OD331"]
    assert data["fleet"]["nodes"] == ["node0", "node1", "node2", "node3"] and data["allreduce"] == []


def test_compare_a_folder_and_text(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compare", str(FLEET)])
    assert res.exit_code == 1 and "2.10.0+cu128 ✗" in res.stdout and "OD330" in res.stdout


def test_compare_bad_input_exits_2(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("not a report\n")
    shutil.copy(FLEET / "node0.json", tmp_path / "good.json")
    for args in (["compare", str(FLEET / "node0.json")], ["compare", str(tmp_path / "junk.json"),
                                                           str(tmp_path / "good.json")],
                 ["compare", str(tmp_path / "absent.json"), str(tmp_path / "good.json")],
                 ["compare", str(FLEET), "--scope", "nope"]):
        res = runner.invoke(app, args)
        assert isinstance(res.exception, UsageError), args
    # the real command line: one line on stderr, exit 2, nothing on stdout
    proc = subprocess.run([sys.executable, "-m", "olmo_doctor", "compare", str(tmp_path / "junk.json"),
                           str(tmp_path / "good.json")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "junk.json" in proc.stderr


def test_check_fleet_outside_a_launcher_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    res = runner.invoke(app, ["check", "--fleet"])
    assert isinstance(res.exception, UsageError) and "torchrun" in str(res.exception)
    res = runner.invoke(app, ["check", "--fleet", "--nccl"])
    assert isinstance(res.exception, UsageError)


def test_report_values_never_reach_the_terminal_as_control_codes_or_markup(tmp_path: Path) -> None:
    for i in range(3):
        data = json.loads((FLEET / "node0.json").read_text())
        if i == 2:
            data["facts"]["torch.version"] = "2.11\x1b]0;pwned\x07[red]x[/red]\x1b[2J"
            data["facts"]["gpu.0.name"] = "\x1b[31mNVIDIA H200"
        (tmp_path / f"evil{i}.json").write_text(json.dumps(data))
    res = runner.invoke(app, ["compare", str(tmp_path)])
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout
    # a version no machine has is refused as bad input (reports/sanity.py), naming the report, its control codes
    # escaped; the GPU name alone (no version field) is shown as inert text
    assert isinstance(res.exception, UsageError)  # main() turns it into one stderr line, exit 2
    assert "evil2.json" in str(res.exception) and "\x1b" not in str(res.exception)
    data = json.loads((FLEET / "node0.json").read_text())
    data["facts"]["gpu.0.name"] = "\x1b[31mNVIDIA H200\x07"
    (tmp_path / "evil2.json").write_text(json.dumps(data))
    res = runner.invoke(app, ["compare", str(tmp_path)])
    assert res.exit_code in (0, 1) and "\x1b" not in res.stdout and "\x07" not in res.stdout


def test_place_under_plain_srun_sets_the_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OLMO_DOCTOR_NODE_NAME"):
        monkeypatch.setenv(var, "")  # recorded as it was (maybe unset): place() sets them, the undo removes them
        monkeypatch.delenv(var)
    for var, value in {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURMD_NODENAME": "gpu004",
                       "SLURM_JOB_NODELIST": "gpu[003-006]"}.items():
        monkeypatch.setenv(var, value)
    assert world.place() == world.Place(5, 8, 1, "gpu004")
    assert os.environ["MASTER_ADDR"] == "gpu003" and os.environ["RANK"] == "5" and os.environ["LOCAL_RANK"] == "1"
    monkeypatch.delenv("MASTER_ADDR")
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "")
    with pytest.raises(UsageError, match="MASTER_ADDR"):
        world.place()


def test_compare_a_folder_of_capture_folders(tmp_path: Path) -> None:
    for name in ("gpu-a", "gpu-b"):
        (tmp_path / name).mkdir()
        shutil.copy(FLEET / f"node{0 if name == 'gpu-a' else 2}.json", tmp_path / name / "report.json")
    res = runner.invoke(app, ["compare", str(tmp_path), "--json"])
    data = json.loads(res.stdout)
    assert data["fleet"]["nodes"] == ["gpu-a", "gpu-b"] and res.exit_code == 1
    assert [r["odd"] for r in data["table"] if r["key"] == "torch.version"] == [["gpu-a", "gpu-b"]]  # no majority


def test_record_folds_member_outcomes_into_a_test() -> None:
    from olmo_doctor.fleet.launch import _record

    log: list[str] = []
    ok = links.Test("pair", ["a", "b"], 2, size_mb=256)
    _record(ok, [{"seconds": 0.01, "correct": True}, {"seconds": 0.02, "correct": True}], log)
    assert ok.busbw_gbps == round(256 * 2**20 / 0.02 / 1e9, 2) and ok.error is None  # the slowest member counts
    wrong = links.Test("pair", ["a", "b"], 2, size_mb=256)
    _record(wrong, [{"seconds": 0.01, "correct": False}, {"seconds": 0.01, "correct": True}], log)
    assert wrong.error == "the all-reduce returned wrong sums"
    failed = links.Test("pair", ["a", "b"], 2, size_mb=256)
    _record(failed, [{"error": "DistBackendError: NCCL error: unhandled system error", "timeout": False}, {}], log)
    assert failed.error and failed.error.startswith("DistBackendError") and not failed.hang
    hung = links.Test("pair", ["a", "b"], 2, size_mb=256)
    _record(hung, [{"error": "RuntimeError: Timed out waiting 1000ms for recv", "timeout": True}, {}], log)
    assert hung.hang and hung.error is None and len(log) == 2
    result = judge(nodes(), tests=[ok, failed, hung], scope="train")
    assert {"OD333", "OD334"} <= {f.code for f in result.findings}
    assert result.facts["fleet.hang"] == ["a <-> b"]
