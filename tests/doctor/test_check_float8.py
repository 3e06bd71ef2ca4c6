"""`olmo-doctor check` says whether `precision: fp8` can run here: torchao's version (dist-info, or a pasted
report's package list), whether torchao.float8 imports against this torch (the torch subprocess, whose cache key
follows torchao), the GPUs' float8 tensor cores, OD244 when torchao was made for another torch, and the fleet row."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

import pytest

from olmo_doctor.compat.kernels import torchao_for_torch
from olmo_doctor.facts import FactValue
from olmo_doctor.fleet import table
from olmo_doctor.probes import dists, torch_probe
from olmo_doctor.render import area_lines, float8_item
from olmo_doctor.report import load_report, parse_text
from olmo_doctor.rules.engine import run_rules
from olmo_doctor.rules.model import load_rules
from tests.helpers import FIXTURES, stand_in_torch
from tests.machines import H200_GPU

A100: dict[str, FactValue] = {**H200_GPU, "gpu.0.name": "NVIDIA A100-SXM4-80GB", "gpu.0.compute_capability": "8.0"}
MIXED: dict[str, FactValue] = {**H200_GPU, "gpu.count": 2, "gpu.1.name": "NVIDIA GeForce RTX 3090",
                               "gpu.1.compute_capability": "8.6"}
RTX5090: dict[str, FactValue] = {**H200_GPU, "gpu.0.name": "NVIDIA GeForce RTX 5090",
                                 "gpu.0.compute_capability": "12.0"}
NO_GPU: dict[str, FactValue] = {"gpu.count": 0, "torch.version": "2.11.0+cpu", "torch.cuda_available": False}
OK: dict[str, FactValue] = {"torchao.version": "0.18.0", "torchao.import_ok": True}
ABSENT: dict[str, FactValue] = {"torchao.version": None}


@pytest.mark.parametrize(("facts", "expected"), [
    ({**H200_GPU, **OK}, "float8: torchao 0.18.0 (precision fp8 ready)"),
    ({**RTX5090, **OK}, "float8: torchao 0.18.0 (precision fp8 ready)"),
    ({**H200_GPU, "gpu.0.compute_capability": "8.9", "gpu.0.name": "NVIDIA GeForce RTX 4090", **OK},
     "float8: torchao 0.18.0 (precision fp8 ready)"),
    ({**H200_GPU, **ABSENT}, "float8: torchao not installed (pip install torchao for precision fp8)"),
    # the pin named is the torchao made for this torch, not the newest one
    ({**H200_GPU, "torch.version": "2.10.0+cu128", **ABSENT},
     "float8: torchao not installed (pip install torchao==0.16.0 for precision fp8)"),
    ({**H200_GPU, "torchao.version": "0.16.0", "torchao.import_ok": False},
     "float8: torchao 0.16.0 does not load against this torch"),
    ({**A100, **ABSENT}, "float8: no float8 tensor cores on NVIDIA A100-SXM4-80GB (cc 8.0)"),
    ({**A100, **OK}, "float8: torchao 0.18.0, but no float8 tensor cores on NVIDIA A100-SXM4-80GB (cc 8.0)"),
    # one GPU without float8 tensor cores is enough to say no, and it is the one named
    ({**MIXED, **OK}, "float8: torchao 0.18.0, but no float8 tensor cores on NVIDIA GeForce RTX 3090 (cc 8.6)"),
    # no GPU: the version only, nothing about readiness
    ({**NO_GPU, **OK}, "float8: torchao 0.18.0"),
    ({**NO_GPU, **ABSENT}, "float8: torchao not installed"),
    # a GPU of unknown capability, torch seeing no GPU, or an import not tried: no claim of readiness
    ({**H200_GPU, "gpu.0.compute_capability": None, **OK}, "float8: torchao 0.18.0"),
    ({**H200_GPU, "torch.cuda_available": False, **OK}, "float8: torchao 0.18.0"),
    ({**H200_GPU, "torchao.version": "0.18.0"}, "float8: torchao 0.18.0"),
], ids=["h200-ready", "5090-ready", "4090-ready", "not-installed", "not-installed-pin", "does-not-load", "a100",
        "a100-installed", "mixed", "no-gpu", "no-gpu-absent", "cc-unknown", "cuda-unavailable", "not-imported"])
def test_float8_item(facts: dict[str, FactValue], expected: str) -> None:
    assert float8_item(facts) == expected


def test_kernels_line_ends_with_the_float8_item() -> None:
    line = area_lines({**H200_GPU, **OK, "flash_attn.version": None, "xformers.version": None})["Kernels"]
    assert line.endswith(", float8: torchao 0.18.0 (precision fp8 ready)")
    assert line.startswith("flash-attn not installed")


def test_a_report_that_does_not_list_torchao_leaves_it_unknown() -> None:
    facts = load_report(FIXTURES / "reports" / "torch2.6-nightly-h100x8.txt")
    assert "torchao.version" not in facts
    assert float8_item(facts) == "float8: torchao ?"
    mixed = load_report(FIXTURES / "reports" / "torch2.4-h100-a100-mixed.txt")
    assert float8_item(mixed) == "float8: no float8 tensor cores on NVIDIA A100-SXM4-80GB (cc 8.0)"


def test_collect_env_package_lines_give_torchao_version() -> None:
    facts = load_report(FIXTURES / "reports" / "torch2.10-h100x8-torchao.txt")
    assert facts["torchao.version"] == "0.18.0" and facts["torch.version"] == "2.10.0+cu128"
    # listed but never imported: the version, no readiness claim
    assert float8_item(facts) == "float8: torchao 0.18.0"


@pytest.mark.parametrize(("line", "version"), [
    ("[pip3] torchao==0.13.0+cu128", "0.13.0+cu128"),
    ("[pip] torchao (0.12.0)", "0.12.0"),
    ("[conda] torchao                   0.16.0                   pypi_0    pypi", "0.16.0"),
    ("torchao                  0.18.0", "0.18.0"),  # `pip list` pasted under the report
    ("torchao==0.17.0", "0.17.0"),  # `pip freeze`
])
def test_report_package_line_forms(line: str, version: str) -> None:
    facts = parse_text("PyTorch version: 2.11.0+cu130\nIs CUDA available: True\n\n"
                       "Versions of relevant libraries:\n[pip3] torch==2.11.0+cu130\n" + line + "\n")
    assert facts.get("torchao.version") == version


def test_raw_capture_pip_section_states_torchao_absent_or_present() -> None:
    head = "== pip\npip 24.0 from /venv/lib/python3.12/site-packages/pip (python 3.12)\nninja   1.13.2\n"
    assert parse_text(head)["torchao.version"] is None  # pip list names everything: unlisted is absent
    assert parse_text(head + "torchao  0.18.0\n")["torchao.version"] == "0.18.0"


@pytest.mark.parametrize(("torch", "requirement"), [
    ("2.13.0+cu130", "torchao>=0.17.0"), ("2.11.0", "torchao>=0.17.0"), ("2.10.0+cu128", "torchao==0.16.0"),
    ("2.9.1+cu128", "torchao==0.15.0"), ("2.9.0", "torchao==0.14.1"), ("2.8.0+cu126", "torchao==0.13.0"),
    ("2.7.1", "torchao==0.12.0"), ("2.6.0+cu126", "torchao==0.12.0"), ("2.10.0.dev20251110", "torchao==0.15.0"),
    ("2.4.1", None), ("not a version", None),
])
def test_torchao_for_torch(torch: str, requirement: str | None) -> None:
    assert torchao_for_torch(torch) == requirement


def _od244(facts: dict[str, FactValue]) -> list[str]:
    rule = next(r for r in load_rules() if r.code == "OD244")
    return [c for f in run_rules(facts, rules=[rule]) for fix in f.fixes for c in fix.commands]


def test_od244_names_the_torchao_for_this_torch_and_is_quiet_without_torchao() -> None:
    broken = {**H200_GPU, "torch.version": "2.9.1+cu128", "torchao.version": "0.18.0", "torchao.import_ok": False,
              "torchao.import_error": "ImportError: x"}
    assert _od244(broken)[0] == "pip install torchao==0.15.0"
    assert _od244({**H200_GPU, **ABSENT}) == [] and _od244({**H200_GPU, **OK}) == []


# --- the torch subprocess, with a stand-in torch (imports in milliseconds) and stand-in torchao packages


FAKE_TORCH = stand_in_torch()
FLOAT8_OK = "class Float8LinearConfig: pass\n"
FLOAT8_LINEAR_OK = "class Float8Linear: pass\nclass matmul_with_hp_or_float8_args: pass\n"
# a torchao built for another torch aborts the interpreter on import; no core file is left behind
FLOAT8_ABORTS = "import os, resource\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))\nos.abort()\n"


def _site(tmp_path: Path, float8_source: str, monkeypatch: pytest.MonkeyPatch,
          float8_linear: str | None = FLOAT8_LINEAR_OK) -> Path:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (site / "torchao" / "float8").mkdir(parents=True, exist_ok=True)
    (site / "torchao" / "__init__.py").write_text("")
    (site / "torchao" / "float8" / "__init__.py").write_text(float8_source)
    if float8_linear is not None:
        (site / "torchao" / "float8" / "float8_linear.py").write_text(float8_linear)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return site


@pytest.mark.parametrize(("source", "ok", "error"), [
    (FLOAT8_OK, True, None),
    ("raise ImportError('undefined symbol: _ZN3c104cuda9SetDeviceEi')\n", False,
     "ImportError: undefined symbol: _ZN3c104cuda9SetDeviceEi"),
    ("", False, "ImportError: torchao.float8 has no Float8LinearConfig"),
    (FLOAT8_ABORTS, False, "importing it killed the Python process (SIGABRT)"),
], ids=["imports", "raises", "too-old", "aborts"])
def test_subprocess_imports_torchao_float8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, ok: bool,
                                          error: str | None) -> None:
    site = _site(tmp_path, source, monkeypatch)
    facts = torch_probe.dynamic_facts(site / "torch", ["torchao"], timeout=60)
    assert facts.get("torchao.import_ok") is ok and facts.get("torchao.import_error") == error
    # what torch said before the import is kept, even when the import killed the process
    assert facts["torch.cuda_available"] is False and "torch.import_error" not in facts


@pytest.mark.parametrize(("float8_linear", "error"), [
    (None, "ImportError: torchao.float8 has no float8_linear.Float8Linear, "
           "float8_linear.matmul_with_hp_or_float8_args"),
    ("class Float8Linear: pass\n", "ImportError: torchao.float8 has no float8_linear.matmul_with_hp_or_float8_args"),
    ("import no_such_dependency_here\n", "ModuleNotFoundError: No module named 'no_such_dependency_here'"),
], ids=["no-submodule", "no-matmul", "submodule-fails"])
def test_the_training_matmul_is_part_of_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                float8_linear: str | None, error: str) -> None:
    """The trainer multiplies through torchao.float8.float8_linear (not the module swap): a torchao without it, or
    whose submodule fails to import, cannot run precision fp8, and check says so."""
    site = _site(tmp_path, FLOAT8_OK, monkeypatch, float8_linear)
    facts = torch_probe.dynamic_facts(site / "torch", ["torchao"], timeout=60)
    assert facts.get("torchao.import_ok") is False and facts.get("torchao.import_error") == error


def test_torchao_is_imported_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = _site(tmp_path, FLOAT8_ABORTS, monkeypatch)
    facts = torch_probe.dynamic_facts(site / "torch", [], timeout=60)
    assert "torchao.import_ok" not in facts and facts["torch.cuda_available"] is False


def test_cache_key_follows_torchao_install_upgrade_and_removal(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "torchao").mkdir(parents=True)
    init = site / "torchao" / "__init__.py"
    init.write_text("")
    monkeypatch.syspath_prepend(str(site))

    def key() -> str:
        importlib.invalidate_caches()
        dists._index.cache_clear()
        installed = [k for dist, k in torch_probe.KERNELS if dists.version(dist)]
        return torch_probe._cache_key(tmp_path, installed)

    try:
        (site / "torchao-0.16.0.dist-info").mkdir()
        installed = key()
        assert "torchao" in [k for d, k in torch_probe.KERNELS if dists.version(d)]  # so the worker imports it
        assert torch_probe._cache_key(tmp_path, []) != installed  # the answer before torchao was installed
        # an upgrade that leaves every file time as it was is still a new answer
        stat = init.stat()
        # (a version no real torchao has: the venv may hold a real one, which answers once the fake is removed)
        (site / "torchao-0.16.0.dist-info").rename(site / "torchao-0.99.0.dist-info")
        os.utime(init, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        upgraded = key()
        assert upgraded != installed
        monkeypatch.setenv("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
        assert key() != upgraded
        monkeypatch.delenv("TORCHAO_FORCE_SKIP_LOADING_SO_FILES")
        assert key() == upgraded  # and nothing else moved it
        shutil.rmtree(site)  # removed (or answered by another torchao further down the path)
        assert key() not in (installed, upgraded)
    finally:
        dists._index.cache_clear()


def test_fleet_marks_the_node_with_another_torchao() -> None:
    node: dict[str, FactValue] = {"torch.version": "2.11.0+cu130", "torchao.version": "0.18.0",
                                  "torchao.import_ok": True}
    nodes = {n: dict(node) for n in ("node0", "node1", "node2")}
    nodes["node2"] = {**nodes["node2"], "torchao.version": None, "torchao.import_ok": None}
    rows = {r.key: r for r in table.build(nodes)}
    assert rows["torchao.version"].odd == ["node2"] and rows["torchao.version"].strict
    assert rows["torchao.import_ok"].odd == ["node2"]
    assert rows["torch.version"].agrees


def test_a_torchao_folder_in_the_working_directory_is_not_imported(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`check` run inside a checkout holding torchao/ must judge the installed torchao, and must not run the
    checkout's code: the worker drops the working directory `python -c` puts first on sys.path."""
    site = _site(tmp_path, FLOAT8_OK, monkeypatch)
    checkout = tmp_path / "checkout"
    (checkout / "torchao" / "float8").mkdir(parents=True)
    (checkout / "torchao" / "__init__.py").write_text("")
    marker = tmp_path / "ran"
    (checkout / "torchao" / "float8" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(checkout)
    facts = torch_probe.dynamic_facts(site / "torch", ["torchao"], timeout=60)
    assert facts["torchao.import_ok"] is True  # the installed (PYTHONPATH) stand-in, which imports
    assert not marker.exists()
