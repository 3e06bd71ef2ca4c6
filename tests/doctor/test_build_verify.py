"""Verification: judging GPU numbers, the attention-backend state file, and (on a GPU) the real check."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers import requires_gpu

from olmo_doctor.build import verify

RAW = {
    "gpu": "NVIDIA H200",
    "compute_capability": "9.0",
    "torch": "2.11.0+cu130",
    "version": "2.8.3.post2",
    "shape": {"batch": 4, "seq": 4096, "heads": 16, "head_dim": 128},
    "dtype": "bfloat16",
    "causal": True,
    "rel_error_bound": 2e-2,
    "max_rel_error": 1.9e-3,
    "kernel_ms": 3.44,
    "sdpa_ms": 2.09,
    "local_rel_error": 2.1e-3,
    "outside_subset": "This flash-attn build (olmo-doctor --subset olmo) has ...",
}


def test_judge_picks_the_faster_backend_and_checks_errors() -> None:
    r = verify.judge("flash-attn", RAW, [128], "olmo-doctor --subset")
    assert r["ok"] and r["faster"] == "sdpa" and r["speedup"] == pytest.approx(3.44 / 2.09, rel=1e-3)
    fast = verify.judge("flash-attn", {**RAW, "kernel_ms": 1.5}, [128])
    assert fast["faster"] == "flash-attn"
    # within timing noise (measured on an H200: xformers 2.204 ms vs SDPA 2.207 ms) SDPA stays the answer
    tie = verify.judge("xformers", {**RAW, "kernel_ms": 2.204, "sdpa_ms": 2.207, "cuda_build": True}, [])
    assert tie["ok"] and tie["faster"] == "sdpa"
    bad = verify.judge("flash-attn", {**RAW, "max_rel_error": 0.5}, [128])
    assert not bad["ok"] and "exceeds" in bad["problems"][0]
    crash = verify.judge("flash-attn", {**RAW, "outside_subset": "no error raised"}, [128])
    assert not crash["ok"] and "did not raise" in crash["problems"][0]
    other = verify.judge("flash-attn", {**RAW, "outside_subset": "CUDA error: invalid argument"}, [128], "olmo-doctor")
    assert not other["ok"]  # some error, but not ours: the dispatch was not cut where we expect
    fa3 = verify.judge("flash-attn-3", {**RAW, "outside_subset": "This flash attention build does not ..."}, [128])
    assert fa3["ok"]  # FA3's own DISABLE_* switches raise upstream's message
    limit = "olmo-doctor --subset"  # what build-kernels expects from FA3's --subset olmo guard (hd 256 asked)
    fa3 = verify.judge("flash-attn-3", {**RAW, "outside_subset": "This FlashAttention-3 build (olmo-doctor --subset "
                                        "olmo) has kernels for head dim 128 only; ... Got 256/256"}, [128], limit)
    assert fa3["ok"]
    for got in ("no error raised", "FlashAttention forward only supports head dimension at most 128"):
        assert not verify.judge("flash-attn-3", {**RAW, "outside_subset": got}, [128], limit)["ok"]
    assert verify.judge("flash-attn", {**RAW, "outside_subset": "x"}, [])["ok"]  # full build: not checked
    xf = verify.judge("xformers", {**RAW, "cuda_build": False}, [])
    assert not xf["ok"] and "xformers.info" in xf["problems"][0]


def test_record_replaces_per_gpu_torch_package(tmp_path: Path) -> None:
    path = tmp_path / "attention_backends.json"
    verify.record(verify.judge("flash-attn", RAW, [128]), path)
    verify.record(verify.judge("xformers", {**RAW, "cuda_build": True, "kernel_ms": 2.5}, []), path)
    verify.record(verify.judge("flash-attn", {**RAW, "kernel_ms": 1.8}, [128]), path)
    data = json.loads(path.read_text())
    assert data["schema"] == 1 and len(data["results"]) == 2
    assert {r["package"]: r["kernel_ms"] for r in data["results"]} == {"flash-attn": 1.8, "xformers": 2.5}
    assert verify.preferred_backend("NVIDIA H200", "2.11.0+cu130", path) == "flash-attn"
    assert verify.preferred_backend("NVIDIA A100-SXM4-80GB", "2.11.0+cu130", path) == "sdpa"
    assert verify.preferred_backend("NVIDIA H200", "2.12.0+cu130", path) == "sdpa"
    verify.record(verify.judge("flash-attn", {**RAW, "kernel_ms": 1.8, "max_rel_error": 1.0}, [128]), path)
    assert verify.preferred_backend("NVIDIA H200", "2.11.0+cu130", path) == "sdpa"  # wrong results never win
    assert verify.preferred_backend("x", "y", tmp_path / "missing.json") == "sdpa"


@requires_gpu()
@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="flash-attn is not installed")
def test_gpu_check_of_installed_flash_attn() -> None:
    r = verify.verify("flash-attn", sys.executable, [], shape="2,1024,8,128")
    assert r["ok"], r.get("problems")
    assert r["max_rel_error"] <= r["rel_error_bound"] and r["faster"] in ("sdpa", "flash-attn")


def _naive_attention(q, k, v, causal=True):
    """Textbook softmax(QK^T / sqrt(d)) V in float32, (batch, seq, heads, dim) layout."""
    import torch

    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = qf @ kf.transpose(-1, -2) / qf.shape[-1] ** 0.5
    if causal:
        t = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ vf).transpose(1, 2).to(q.dtype)


def test_gpucheck_comparison_harness_on_cpu() -> None:
    """The fwd+bwd comparison the GPU check runs, with a known-good and a known-wrong kernel."""
    from olmo_doctor.build import gpucheck

    shape = (1, 64, 2, 32)
    good = gpucheck._compare(_naive_attention, shape, device="cpu")
    assert set(good["rel_errors"]) == {"out", "dq", "dk", "dv"}
    assert good["max_rel_error"] < gpucheck.REL_ERROR_BOUND
    assert good["kernel_ms"] > 0 and good["sdpa_ms"] > 0
    wrong = gpucheck._compare(lambda q, k, v: _naive_attention(q, k, v, causal=False), shape, device="cpu")
    assert wrong["max_rel_error"] > 10 * gpucheck.REL_ERROR_BOUND  # a non-causal kernel is caught


def test_xformers_info_parsing() -> None:
    from olmo_doctor.build.gpucheck import xformers_info

    cuda_build = (
        "xFormers 0.0.35\nmemory_efficient_attention.cutlassF-pt:   available\nbuild.cuda_version:  1300\n"
        "build.env.TORCH_CUDA_ARCH_LIST:  9.0a\nbuild.nvcc_version:  13.0.88\n"
    )
    fields, ok = xformers_info(cuda_build)
    assert ok and fields["build.env.TORCH_CUDA_ARCH_LIST"] == "9.0a"
    assert fields["memory_efficient_attention.cutlassF-pt"] == "available"
    cpu_build = "xFormers 0.0.35\nbuild.cuda_version:  None\nbuild.python_version: 3.12.3\n"
    assert xformers_info(cpu_build)[1] is False


def test_a_crashing_check_is_named(tmp_path: Path) -> None:
    """A kernel that kills the check process (SIGSEGV) fails verification and the report names the check that
    was running: a real crashing process, the same one-process protocol gpucheck.py follows."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'gpucheck: running main' >&2\n"
        "echo 'gpucheck: running local' >&2\n"
        "echo '  File \"flash_attn_interface.py\", line 91 in _flash_attn_forward' >&2\n"
        "kill -SEGV $$\n"
    )
    fake.chmod(0o755)
    res = verify.verify("flash-attn", str(fake), [128])
    assert not res["ok"]
    problem = res["problems"][0]
    assert "signal 11" in problem and "during the sliding-window attention check" in problem
    assert "line 91 in _flash_attn_forward" in problem


def test_pending_check_waits_for_the_package_then_judges(tmp_path: Path) -> None:
    """The check started before the build (--wait) does nothing with the package until it reads 'go'; a failed
    build cancels it. A stand-in interpreter plays gpucheck's side of that protocol."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--wait*) ;; *) exit 9 ;; esac\n'
        "echo 'gpucheck: running ready' >&2\n"
        "read line\n"
        '[ "$line" = go ] || exit 3\n'
        f"echo '{json.dumps(RAW)}'\n"
    )
    fake.chmod(0o755)
    pending = verify.PendingCheck("flash-attn", str(fake), [128])
    assert pending.proc.poll() is None  # waiting for the build
    res = pending.finish(subset_text="olmo-doctor --subset olmo")
    assert res["ok"] and res["faster"] == "sdpa" and res["kernel_ms"] == RAW["kernel_ms"]
    cancelled = verify.PendingCheck("flash-attn", str(fake), [128])
    cancelled.cancel()
    assert cancelled.proc.returncode is not None
