"""A cached reinstall does only its own work. `build-kernels` with its wheel in the cache, right after an install
changed the kernel's files and site-packages (what the previous build-kernels run did): no torch worker runs (no
torch import: torch's answer is cached under a key a kernel's install does not change, and the kernel being
replaced is not asked about), the cached wheel and its private copy are hashed once each, and pip is called once,
with --no-deps --no-index, isolated (-I). Every safety check of the cache still refuses what it refused
(tests/doctor/test_build_cache.py, tests/security/test_security_cache.py); here the count of work is the subject.

The machine is the H200 of tests/machines.py, with the torch worker replaced by a counter and a stand-in torch and
flash-attn installed in a temporary site folder (their files are real: the keys stat them)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

import pytest

import olmo_doctor.probes
from olmo_doctor.build import cache
from olmo_doctor.commands import build_kernels
from olmo_doctor.probes import dists, torch_probe
from tests.doctor.test_build_cache import _wheel
from tests.machines import H200

PROBED_BY_WORKER = ("torch.", "flash_attn.", "flash_attn_3.", "xformers.", "torchao.")


class Worker:
    """The torch worker as a counter: a CUDA torch that starts CUDA on one H200; every kernel asked imports."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def __call__(self, args: list[str], timeout: float) -> tuple[dict[str, object], int]:
        self.asked.append(list(args))
        out: dict[str, object] = {} if "--kernels-only" in args else {
            "torch.cxx11abi": True, "torch.arch_list": ["sm_80", "sm_90", "sm_100", "sm_120"],
            "torch.cuda_available": True, "torch.cuda_device_count": 1, "torch.cuda_exercised": 1}
        out.update({f"{k}.import_ok": True for k in args if not k.startswith("--")})
        return out, 0


def _touch(path: Path) -> None:
    st = path.stat()
    import os

    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def _install_flash_attn(site: Path, build: bytes) -> None:
    """What pip leaves behind installing the kernel: its extension and a (re)created dist-info."""
    (site / "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF" + build)
    info = site / "flash_attn-2.8.3.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\nRequires-Dist: torch\n")
    (info / "RECORD").write_text(f"flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so,,{len(build)}\n")
    _touch(site)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Worker]]:
    site = tmp_path / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch-2.11.0+cu130.dist-info").mkdir()
    (site / "torch-2.11.0+cu130.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\n")
    _install_flash_attn(site, b"first build")
    monkeypatch.syspath_prepend(str(site))
    # the stand-in torch on the path, not a torch this test process imported earlier (find_spec answers from
    # sys.modules first; the doctor's own process has not imported torch)
    monkeypatch.setattr(torch_probe, "find_spec", lambda name: PathFinder.find_spec(name, [str(site), *sys.path]))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real_version = dists.version
    # only the kernels installed here (whatever else this test's Python has, a torchao say, is no part of it)
    monkeypatch.setattr(dists, "version", lambda name: real_version(name) if any(
        site.glob(f"{name.replace('-', '_')}-*.dist-info")) else None)
    dists._index.cache_clear()
    worker = Worker()
    monkeypatch.setattr(torch_probe, "run_worker", worker)
    here = {k: v for k, v in H200.items() if not k.startswith(PROBED_BY_WORKER)}

    def collect(runner: Any = None, deep: bool = False, import_torch: bool = True,
                skip_kernels: Any = ()) -> dict[str, object]:  # the H200's probes, this torch's worker
        return {**here, "python.executable": sys.executable,
                **torch_probe.probe(import_torch, skip_kernels=frozenset(skip_kernels))}

    monkeypatch.setattr(olmo_doctor.probes, "collect", collect)
    yield site, worker
    dists._index.cache_clear()


def test_a_cached_reinstall_runs_no_worker_one_pip_and_two_hashes(machine: tuple[Path, Worker], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    site, worker = machine
    torch_probe.probe()  # `check` on this machine: torch and the installed flash-attn asked once
    assert worker.asked == [["flash_attn"]]
    ((_, plan),) = build_kernels._plans(["flash-attn"], None, None, None, None, (), None)
    assert plan.ok, [b.code for b in plan.blockers]
    cache.store(plan, _wheel(tmp_path))
    _install_flash_attn(site, b"the build before")  # the previous build-kernels installed it
    dists._index.cache_clear()

    pip: list[list[str]] = []
    hashed: list[Path] = []
    real_sha = cache.sha256_file
    monkeypatch.setattr(cache, "sha256_file", lambda p: hashed.append(Path(p)) or real_sha(p))
    monkeypatch.setattr(cache.subprocess, "run", lambda argv, **kw: pip.append(list(argv))
                        or subprocess.CompletedProcess(argv, 0, "", ""))
    code = build_kernels.run("flash-attn", None, None, None, None, (), False, True, None, False, False)
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert code == 0 and result["status"] == "cached", result
    assert worker.asked == [["flash_attn"]]  # no worker since `check`: no torch import
    assert len(pip) == 1 and pip[0][:3] == [sys.executable, "-I", "-m"] and pip[0][3:5] == ["pip", "install"]
    assert {"--no-deps", "--no-index"} <= set(pip[0])
    assert len(hashed) == 2 and hashed[0].parent != hashed[1].parent  # the cached wheel, then its private copy


def test_check_after_the_reinstall_asks_about_the_new_kernel_only(machine: tuple[Path, Worker]) -> None:
    """The install did change the kernel: the next `check` imports it again (and only it)."""
    site, worker = machine
    torch_probe.probe()
    _install_flash_attn(site, b"reinstalled")
    dists._index.cache_clear()
    facts = torch_probe.probe()
    assert worker.asked == [["flash_attn"], ["--kernels-only", "flash_attn"]]
    assert facts["flash_attn.import_ok"] is True and facts["torch.cuda_available"] is True


def test_a_real_build_asks_about_torch_but_not_the_kernel_it_replaces(machine: tuple[Path, Worker]) -> None:
    """On a machine whose torch-facts cache is cold, a real build's plan asks the worker about torch alone."""
    _, worker = machine
    build_kernels._plans(["flash-attn"], None, None, None, None, (), None)
    assert worker.asked == [[]]
    build_kernels._plans(["flash-attn"], None, None, None, None, (), None, dry_run=True)  # as `check` does
    assert worker.asked == [[], ["--kernels-only", "flash_attn"]]
