"""`olmo-doctor check` names each installed attention kernel, whether it loads against this torch, and whether it
is the one `attn_backend: auto` takes (build-kernels' GPU check found it faster than SDPA on this GPU and torch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmo_doctor.probes import torch_probe
from olmo_doctor.render import area_lines
from tests.machines import H200_GPU


def test_kernels_line_says_loads_and_auto_pick() -> None:
    facts = {**H200_GPU, "flash_attn.version": "2.8.3.post2+olmo.hd128.bf16", "flash_attn.import_ok": True,
             "flash_attn_3.version": "3.0.0+olmo.hd128.bf16", "flash_attn_3.import_ok": True,
             "xformers.version": "0.0.35", "xformers.import_ok": False, "attention.auto_pick": "flash-attn-3"}
    line = area_lines(facts)["Kernels"]
    assert "flash-attn 2.8.3.post2+olmo.hd128.bf16 (loads)" in line
    assert "flash-attn-3 3.0.0+olmo.hd128.bf16 (loads; auto picks it)" in line
    assert "xformers 0.0.35 (does not load)" in line  # no error text: nothing more is claimed


@pytest.mark.parametrize(("error", "reason"), [
    ("ImportError: /v/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: file too short",
     "its file is damaged"),
    ("ImportError: /v/flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "built against another torch"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
     "built for another CUDA"),
    ("ImportError: libfoo.so.3: cannot open shared object file: No such file or directory",
     "a library it needs is missing"),
])
def test_kernels_line_names_the_loaders_reason(error: str, reason: str) -> None:
    """The Kernels line says why a kernel does not load, from the loader's words, not a blanket 'another torch'."""
    facts = {**H200_GPU, "flash_attn.version": "2.8.3", "flash_attn.import_ok": False, "flash_attn.import_error": error}
    assert f"flash-attn 2.8.3 (does not load: {reason})" in area_lines(facts)["Kernels"]


def test_no_kernel_beat_sdpa_is_said() -> None:
    facts = {**H200_GPU, "flash_attn.version": "2.8.3", "flash_attn.import_ok": True, "attention.auto_pick": "sdpa"}
    line = area_lines(facts)["Kernels"]
    assert "auto picks" not in line and "no built kernel beat SDPA" in line
    assert "flash-attn-3 not installed" in line


def test_auto_pick_reads_build_kernels_record_for_this_gpu_and_torch(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from olmo_doctor.build.verify import state_path

    state_path().parent.mkdir(parents=True, exist_ok=True)
    rec = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "ok": True, "kernel_ms": 1.9, "sdpa_ms": 2.1}
    state_path().write_text(json.dumps({"results": [
        {**rec, "package": "flash-attn-3", "faster": "flash-attn-3"},
        {**rec, "package": "flash-attn", "faster": "sdpa", "kernel_ms": 3.5},
        {**rec, "package": "xformers", "faster": "xformers", "kernel_ms": 1.0, "torch": "2.10.0+cu128"},
        {**rec, "package": "flash-attn", "faster": "sdpa", "gpu": "NVIDIA L40S"}]}))
    assert torch_probe.auto_pick(H200_GPU) == {"attention.auto_pick": "flash-attn-3"}
    assert torch_probe.auto_pick({**H200_GPU, "gpu.0.name": "NVIDIA L40S"}) == {"attention.auto_pick": "sdpa"}
    assert torch_probe.auto_pick({**H200_GPU, "gpu.0.name": "NVIDIA A100"}) == {"attention.auto_pick": "timed"}
    assert torch_probe.auto_pick({"gpu.count": 0}) == {"attention.auto_pick": None}


def test_no_build_kernels_record_is_not_called_a_loss_for_the_kernels(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing recorded for this GPU and torch, nobody has timed the kernels yet: check says the trainer will,
    instead of claiming that none beat SDPA (the H200 image with FA3 installed but no build-kernels run)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    from olmo_doctor.build.verify import preferred_backend, recorded_backend
    from olmo_doctor.probes.torch_probe import auto_pick

    assert recorded_backend("NVIDIA H200", "2.11.0+cu130") is None
    assert preferred_backend("NVIDIA H200", "2.11.0+cu130") == "sdpa"  # what the trainer falls back to
    pick = auto_pick(dict(H200_GPU))
    assert pick == {"attention.auto_pick": "timed"}
    line = area_lines({**H200_GPU, **pick, "flash_attn_3.version": "3.0.0", "flash_attn_3.import_ok": True})["Kernels"]
    assert "no build-kernels record" in line and "beat SDPA" not in line and "auto picks" not in line
