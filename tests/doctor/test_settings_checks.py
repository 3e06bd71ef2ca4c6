"""Settings every process of a run inherits, read from the real environment and the real loader: debugging
switches left on, an OMP_NUM_THREADS OpenMP cannot read, a library LD_PRELOAD names that ld.so cannot load (what
the loader prints in a real child process), and a /dev/shm multiprocessing and NCCL cannot use. Each is judged
with the rule that names it, and the healthy value is judged quiet."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from olmo_doctor.probes import env_vars, paths, torch_probe
from olmo_doctor.rules.engine import run_rules

GPU = {"gpu.count": 1, "gpu.0.memory_gb": 141.0}


def _codes(facts: dict[str, object], scope: str = "train") -> set[str]:
    return {f.code for f in run_rules(facts, scope=scope)}


@pytest.mark.parametrize(("name", "value"), [
    ("CUDA_LAUNCH_BLOCKING", "1"), ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"), ("TORCH_CUDA_SANITIZER", "1"),
    ("TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
])
def test_a_debugging_switch_in_the_environment_is_named(monkeypatch: pytest.MonkeyPatch, name: str,
                                                       value: str) -> None:
    for other in ("CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING", "TORCH_CUDA_SANITIZER",
                  "TORCH_DISTRIBUTED_DEBUG"):
        monkeypatch.delenv(other, raising=False)
    assert "OD294" not in _codes({**env_vars.probe(), **GPU})
    monkeypatch.setenv(name, value)
    findings = [f for f in run_rules({**env_vars.probe(), **GPU}, scope="train") if f.code == "OD294"]
    assert findings and f"{name}={value}" in findings[0].title
    # the fix is pasteable: each variable its own word
    assert any(f"unset {name}" == c for fix in findings[0].fixes for c in fix.commands)


def test_several_switches_are_unset_as_separate_words() -> None:
    facts = {"env.CUDA_LAUNCH_BLOCKING": "1", "env.TORCH_DISTRIBUTED_DEBUG": "DETAIL", **GPU}
    (finding,) = [f for f in run_rules(facts, scope="train") if f.code == "OD294"]
    assert finding.fixes[0].commands == ["unset CUDA_LAUNCH_BLOCKING TORCH_DISTRIBUTED_DEBUG"]


@pytest.mark.parametrize(("value", "fires"), [("0", True), ("-4", True), ("four", True), ("", True),
                                              ("8", False), ("16,4", False)])
def test_omp_num_threads_as_openmp_reads_it(monkeypatch: pytest.MonkeyPatch, value: str, fires: bool) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert ("OD295" in _codes({**env_vars.probe(), **GPU})) is fires


def _worker_answering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that answers at once (no torch), started the way the torch worker is: a real Python process."""
    worker = tmp_path / "worker.py"
    worker.write_text("import json; print(json.dumps({'torch.version': '2.11.0'}))\n")
    monkeypatch.setattr(torch_probe, "WORKER_SOURCE", worker)


def test_what_the_loader_says_about_ld_preload_is_the_finding(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_answering(tmp_path, monkeypatch)
    missing = tmp_path / "gone" / "libjemalloc.so.2"
    monkeypatch.setenv("LD_PRELOAD", str(missing))
    facts, code = torch_probe.run_worker([], 60)
    assert code == 0 and facts is not None
    said = facts.get("loader.preload_error")
    assert isinstance(said, str) and str(missing) in said  # ld.so's own words, from the real loader
    findings = [f for f in run_rules({**facts, **GPU}, scope="train") if f.code == "OD296"]
    assert findings and str(missing) in findings[0].title


def test_a_library_that_loads_is_not_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_answering(tmp_path, monkeypatch)
    # the C library this very process has loaded (glibc or musl): a library that certainly loads
    maps = Path("/proc/self/maps").read_text().split()
    libc = next(w for w in maps if w.startswith("/") and Path(w).name.startswith(("libc.so", "libc-", "ld-musl")))
    monkeypatch.setenv("LD_PRELOAD", libc)
    facts, _ = torch_probe.run_worker([], 60)
    assert facts is not None and "loader.preload_error" not in facts
    assert "OD296" not in _codes({**facts, **GPU})


@pytest.mark.parametrize("shm", ["missing", "under-a-file"])
def test_an_unusable_shared_memory_folder_is_judged_by_the_gpus_it_serves(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          shm: str) -> None:
    (tmp_path / "afile").write_text("x")
    folder = tmp_path / "no-shm" if shm == "missing" else tmp_path / "afile" / "shm"
    monkeypatch.setattr(paths, "SHM", str(folder))
    monkeypatch.setattr(sys, "platform", "linux")
    facts = paths.probe()
    assert facts["paths.shm_error"]
    one = _codes({**facts, **GPU})
    assert "OD298" in one and "OD297" not in one
    eight = [f for f in run_rules({**facts, "gpu.count": 8, "gpu.0.memory_gb": 141.0}, scope="train")]
    (root,) = [f for f in eight if f.code == "OD297"]
    (nested,) = [f for f in eight if f.code == "OD298"]
    assert root.severity == "error" and nested.root == "OD297"  # one root error, the warning nested under it
    assert (tmp_path / "afile").read_text() == "x"


def test_a_writable_shared_memory_folder_is_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "SHM", str(tmp_path))
    facts = paths.probe()
    assert facts["paths.shm_error"] is None and list(tmp_path.iterdir()) == []
    assert not {"OD297", "OD298"} & _codes({**facts, "gpu.count": 8, "gpu.0.memory_gb": 141.0})


def test_facts_are_json() -> None:
    json.dumps(paths.probe())
