"""Probes read tools and files into facts and never raise; replayed here through fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.probes import cgroup, collect, cuda, gpu, libc
from olmo_doctor.run import FakeRunner, Result

SMI_ROWS = ("NVIDIA H200, 9.0, 143771, 00000000:00:06.0, 580.159.04\n"
            "NVIDIA H200, 9.0, 143771, 00000000:00:07.0, 580.159.04\n")
SMI_HEAD = "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |"
TOPO = "\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n"


def test_nvidia_smi_fallback_parses_gpus_driver_and_nvlink() -> None:
    run = FakeRunner({" ".join(gpu.SMI_QUERY): SMI_ROWS, "nvidia-smi": SMI_HEAD, "nvidia-smi topo -m": TOPO})
    facts = gpu.probe(run, use_nvml=False)
    assert facts["gpu.count"] == 2 and facts["gpu.source"] == "nvidia-smi"
    assert facts["gpu.1.compute_capability"] == "9.0"
    assert facts["gpu.0.memory_gb"] == pytest.approx(150.8, abs=0.1)
    assert facts["driver.version"] == "580.159.04" and facts["driver.cuda_version"] == "13.0"
    assert facts["gpu.nvlink"] is True


def test_no_driver_means_zero_gpus() -> None:
    facts = gpu.probe(FakeRunner({}), use_nvml=False)
    assert facts["gpu.count"] == 0 and facts["driver.version"] is None


def test_failing_nvidia_smi_is_not_a_crash() -> None:
    run = FakeRunner({" ".join(gpu.SMI_QUERY): Result(ok=False, stderr="NVIDIA-SMI has failed", returncode=9)})
    assert gpu.probe(run, use_nvml=False)["gpu.count"] == 0


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("8589934592\n")
    (tmp_path / "memory.current").write_text("2147483648\n")
    (tmp_path / "memory.stat").write_text("anon 1\ninactive_file 1073741824\n")
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert cgroup.memory_limit_bytes(tmp_path) == 8589934592
    assert cgroup.memory_used_bytes(tmp_path) == 1073741824
    assert cgroup.cpu_quota(tmp_path) == 2.5
    assert 1 <= cgroup.usable_cpus(tmp_path) <= 3


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    mem = tmp_path / "memory"
    mem.mkdir()
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup.memory_limit_bytes(tmp_path) is None
    assert cgroup.cpu_quota(tmp_path) is None


def test_host_config_max_gcc_read_from_header(tmp_path: Path) -> None:
    crt = tmp_path / "include" / "crt"
    crt.mkdir(parents=True)
    (crt / "host_config.h").write_text("#if defined(__GNUC__)\n#if __GNUC__ > 14\n#error -- unsupported GNU version!\n")
    assert cuda.host_config_max_gcc(str(tmp_path)) == 14


def test_wrapper_script_nvcc_resolves_to_the_real_toolkit(tmp_path: Path) -> None:
    real = tmp_path / "cuda-13.0"
    (real / "include").mkdir(parents=True)
    (real / "include" / "cuda_runtime.h").write_text("")
    (real / "bin").mkdir()
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {real}/bin/nvcc \"$@\"\n")
    assert cuda.toolkit_root(str(tmp_path), str(wrapper)) == str(real)


def test_glibcxx_max_scans_symbol_versions(tmp_path: Path) -> None:
    lib = tmp_path / "libstdc++.so.6"
    lib.write_bytes(b"\x00GLIBCXX_3.4.9\x00GLIBCXX_3.4.30\x00GLIBCXX_3.4\x00GLIBCXX_3.4.29\x00")
    assert libc.glibcxx_max(str(lib)) == "3.4.30"


def test_collect_on_this_machine_never_raises_and_fills_core_keys() -> None:
    facts = collect(import_torch=False)
    assert "probe.error" not in facts, facts.get("probe.error")
    for key in ("python.version", "cpu.count", "mem.total_gb", "glibc.version", "gpu.count", "ulimit.nofile.soft"):
        assert facts.get(key) is not None, key


def test_a_crashing_probe_loses_only_its_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo_doctor.probes import system

    def boom() -> dict[str, object]:
        raise RuntimeError("odd machine")

    monkeypatch.setattr(system, "probe", boom)
    facts = collect(import_torch=False)
    assert facts["probe.error"] == "RuntimeError: odd machine"
    assert facts["python.version"] is not None


def test_torch_facts_cache_key_follows_the_kernel_extension_on_the_path(tmp_path, monkeypatch) -> None:
    """A stale kernel extension earlier on the path (PYTHONPATH) must not be answered from the cache of the clean
    install: the key names the extension module the probe imports, not only the package."""
    from olmo_doctor.probes import torch_probe

    monkeypatch.syspath_prepend(str(tmp_path / "clean"))
    (tmp_path / "clean").mkdir()
    before = torch_probe._cache_key(tmp_path, ["flash_attn"])
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "flash_attn_2_cuda.py").write_text("raise ImportError('undefined symbol: _ZN3c10')\n")
    monkeypatch.syspath_prepend(str(shadow))
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    assert torch_probe._cache_key(tmp_path, ["flash_attn"]) != before
