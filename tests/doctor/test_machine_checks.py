"""The machine as training will meet it: resource limits read from a real shell's `ulimit`, the folders training
writes into tried for real (and left exactly as they were), NCCL's and gloo's interface variables parsed as NCCL
parses them and judged against the machine's interfaces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from olmo_doctor.checks.nccl import parse_list, selected
from olmo_doctor.probes import network, paths
from olmo_doctor.rules.engine import run_rules

BASH = shutil.which("bash")
LIMITS = "import json; from olmo_doctor.probes import system; print(json.dumps(system.limits()))"


def _limits(ulimits: str) -> dict[str, object]:
    out = subprocess.run([BASH or "bash", "-c", f"{ulimits} exec {sys.executable} -c '{LIMITS}'"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize(("ulimits", "key", "value", "code"), [
    ("ulimit -t 3600;", "ulimit.cpu.soft", 3600, "OD271"),
    ("ulimit -f 1000000;", "ulimit.fsize.soft", 1000000 * 1024, "OD272"),  # bash counts 1024-byte blocks
    ("ulimit -v 4000000;", "ulimit.as.soft", 4000000 * 1024, "OD270"),
])
def test_a_real_ulimit_is_read_and_judged(ulimits: str, key: str, value: int, code: str) -> None:
    facts = _limits(ulimits)
    assert facts[key] == value
    gpu = {"gpu.count": 1, "gpu.0.memory_gb": 141.0}
    assert code in {f.code for f in run_rules({**facts, **gpu}, scope="train")}
    assert code not in {f.code for f in run_rules({**_limits(""), **gpu}, scope="train")}


def test_a_cpu_plan_is_not_stopped_by_an_address_space_limit() -> None:
    facts = {"ulimit.as.soft": 4096000000, "gpu.count": 1, "gpu.0.memory_gb": 141.0, "plan.device": "cpu"}
    assert "OD270" not in {f.code for f in run_rules(facts, scope="train")}


def test_a_writable_folder_passes_and_is_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("x")
    before = sorted(os.listdir(tmp_path))
    assert paths.problem(str(tmp_path)) is None
    assert paths.problem(str(tmp_path / "not" / "yet")) is None  # created by the tool later: its parent is tried
    assert sorted(os.listdir(tmp_path)) == before and not (tmp_path / "not").exists()


def test_a_folder_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    said = paths.problem(str(tmp_path / "afile" / "cache"))
    assert said is not None and "not a folder" in said and (tmp_path / "afile").read_text() == "x"


def test_tmpdir_must_exist(tmp_path: Path) -> None:
    said = paths.problem(str(tmp_path / "gone"), must_exist=True)
    assert said is not None and "does not exist" in said
    assert paths.problem(str(tmp_path), must_exist=True) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere; the permission path needs another user")
def test_a_folder_without_write_permission_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        said = paths.problem(str(locked))
        assert said is not None and "Permission denied" in said
    finally:
        locked.chmod(0o700)


def test_a_noexec_mount_is_refused_for_a_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(f"36 35 98:0 / / rw,relatime - ext4 /dev/root rw\n"
                    f"40 36 0:34 / {tmp_path} rw,nosuid,nodev,noexec - tmpfs tmpfs rw\n")
    monkeypatch.setattr(paths, "MOUNTINFO", info)
    said = paths.problem(str(tmp_path), needs_exec=True)
    assert said is not None and "noexec" in said
    assert paths.problem(str(tmp_path)) is None  # TMPDIR needs no exec


def test_the_cache_folders_follow_their_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "ind"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tri"))
    assert paths.inductor_cache() == str(tmp_path / "ind") and paths.triton_cache() == str(tmp_path / "tri")
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.delenv("TRITON_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.triton_cache() == str(tmp_path / "home" / ".triton" / "cache")  # HOME decides Triton's default


@pytest.mark.parametrize(("spec", "names", "expected"), [
    ("eth", ["eth0", "eth1", "lo"], ["eth0", "eth1"]),
    ("=eth", ["eth0", "lo"], []),
    ("=eth0,eth1", ["eth0", "eth1", "eth10"], ["eth0", "eth1"]),
    ("^docker,lo", ["docker0", "ens5", "lo"], ["ens5"]),
    ("^=docker0", ["docker0", "docker1"], ["docker1"]),
    ("mlx5_0:1,mlx5_1", ["mlx5_0:1", "mlx5_0:2", "mlx5_1:1"], ["mlx5_0:1", "mlx5_1:1"]),
    ("^mlx5_0", ["mlx5_0:1", "mlx5_1:1"], ["mlx5_1:1"]),
    ("=mlx5_1:2", ["mlx5_1:1", "mlx5_1:2"], ["mlx5_1:2"]),
])
def test_nccl_lists_select_as_nccl_does(spec: str, names: list[str], expected: list[str]) -> None:
    assert selected(spec, names) == expected


def test_parse_list() -> None:
    assert parse_list("^=a:1,b") == (True, True, [("a", 1), ("b", None)])


def test_interfaces_are_probed_when_an_interface_variable_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    assert network.probe() == {}
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nope0")
    facts = network.probe()
    interfaces = facts["net.interfaces"]
    assert isinstance(interfaces, list) and "lo" in interfaces
    found = {f.code for f in run_rules({**facts, "env.GLOO_SOCKET_IFNAME": "nope0"}, scope="train")}
    assert "OD283" in found
    lo = {f.code for f in run_rules({**facts, "env.GLOO_SOCKET_IFNAME": "lo"}, scope="train")}
    assert "OD283" not in lo
