"""The build planner on the machines of machines.py: archs, MAX_JOBS bounds, refusals, cache key, recipes."""

from __future__ import annotations

import math

import pytest

from olmo_doctor.build.plan import MEMORY_FRACTION, RESERVED_GB, BuildRequest, plan_build, size_jobs
from olmo_doctor.build.recipes import all_recipes, find_recipe
from olmo_doctor.errors import UsageError
from olmo_doctor.findings import Finding
from olmo_doctor.rules.engine import run_rules
from tests.machines import A100, CONTAINER_8GB, CPU_ONLY, H200, MACHINES, RTX4090_WSL, V100_CUDA13

FA = find_recipe("flash-attn")
XF = find_recipe("xformers")


def _plan(facts, recipe=FA, **req):
    return plan_build(facts, recipe, BuildRequest(package=recipe.package, work_root="/cache", **req))


def test_recipes_load_and_pin_real_hashes():
    recipes = {r.package: r for r in all_recipes()}
    assert set(recipes) == {"flash-attn", "xformers", "flash-attn-3"}
    assert recipes["flash-attn-3"].needs_source and not recipes["flash-attn"].needs_source
    assert recipes["flash-attn"].version == "2.8.3.post2"
    assert recipes["flash-attn"].sha256 == "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b"
    assert recipes["xformers"].version == "0.0.35"
    assert recipes["flash-attn"].subsets["olmo"].translation_units == 7
    with pytest.raises(UsageError, match=r"pinned: 2\.8\.3\.post2"):
        find_recipe("flash-attn", "2.7.0")


def test_h200_targets_arch_90_only_and_sizes_jobs_from_that_machine():
    full = _plan(H200)
    assert full.archs == ["90"] and full.env["FLASH_ATTN_CUDA_ARCHS"] == "90"
    assert full.env["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"  # literal TRUE, setup.py ignores '1'
    assert full.env["NVCC_THREADS"] == "1"  # one arch: nvcc --threads has nothing to run in parallel
    assert full.env["MAX_JOBS"] == "16" and "CPUs" in full.sizing.reason  # 16 CPUs bind before 134 GB
    assert full.env["CUDA_HOME"] == "/usr/local/cuda"
    assert (full.env["CC"], full.env["CXX"]) == ("/opt/gcc/bin/gcc", "/opt/gcc/bin/g++")
    assert full.predicted_peak_gb == pytest.approx(16 * 4.0 + RESERVED_GB)  # the anchor build peaked at 64 GB
    assert full.argv[1:9] == ["-I", "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index"]
    sub = _plan(H200, subset="olmo")
    # 16 CPUs and 134 GB run all 10 long jobs in one wave: the backward files split by branch
    assert sub.translation_units == 7 and sub.split_branches and sub.compile_jobs == 12
    assert sub.env["MAX_JOBS"] == "12" and sub.cache_key["split_branches"] is True
    assert sub.version == "2.8.3.post2+olmo.hd128.bf16"
    assert sub.env["FLASH_ATTN_LOCAL_VERSION"] == "olmo.hd128.bf16"
    assert full.ok and sub.ok and not full.warnings


@pytest.mark.parametrize("name", sorted(MACHINES))
@pytest.mark.parametrize("subset", [None, "olmo"])
def test_max_jobs_never_exceeds_memory_or_cpus(name, subset):
    facts = MACHINES[name]
    p = _plan(facts, subset=subset)
    s = p.sizing
    mem = facts["mem.available_gb"]
    assert isinstance(mem, float), name
    usable = mem * MEMORY_FRACTION - RESERVED_GB
    assert s.jobs >= 1
    assert s.jobs == 1 or s.jobs * s.gb_per_job <= usable
    assert s.jobs * s.threads_per_job <= facts["cpu.count"] or s.jobs == 1
    assert s.jobs <= p.compile_jobs
    assert int(p.env["MAX_JOBS"]) == s.jobs


def test_branch_split_only_when_every_long_job_runs_at_once():
    """Branch files repeat ~15 s of headers each: on a machine that cannot run all 10 long jobs together the
    plan keeps the 7 whole units (fewer, longer jobs finish sooner there)."""
    for name, facts in MACHINES.items():
        p = _plan(facts, subset="olmo")
        mem, cpus = facts["mem.available_gb"], facts["cpu.count"]
        assert isinstance(mem, float) and isinstance(cpus, int), name
        wide = size_jobs(mem, cpus, p.sizing.gb_per_job, 1, 12, None)
        assert p.split_branches == (wide.jobs >= 10), name
        assert p.compile_jobs == (12 if p.split_branches else 7)
        assert p.sizing.jobs <= p.compile_jobs
    small = _plan({**H200, "cpu.count": 8}, subset="olmo")
    assert not small.split_branches and small.env["MAX_JOBS"] == "7" and small.compile_jobs == 7
    assert small.cache_digest != _plan(H200, subset="olmo").cache_digest  # a different build, a different wheel


def test_container_uses_cgroup_limits_not_the_host():
    p = _plan(CONTAINER_8GB)
    assert p.env["MAX_JOBS"] == "1"  # 8 GB fits one 4 GB job with headroom; the host's 64 cores do not count
    tight = _plan(CONTAINER_8GB, subset="olmo")
    assert tight.env["MAX_JOBS"] == "1"
    assert [w.code for w in tight.warnings] == ["BK102"]  # one subset job may not fit: say so


def test_size_jobs_property():
    for mem in (4, 7.5, 16, 31, 64, 131, 512, 2000):
        for cpus in (1, 2, 4, 16, 96, 256):
            for gb in (3.0, 4.0, 6.5, 16.0):
                for threads in (1, 2, 4):
                    s = size_jobs(mem, cpus, gb, threads, 73, None)
                    assert 1 <= s.jobs <= max(1, cpus // threads)
                    assert s.jobs == 1 or s.jobs * gb <= mem * MEMORY_FRACTION - RESERVED_GB
                    assert s.jobs == min(
                        max(1, math.floor((mem * MEMORY_FRACTION - RESERVED_GB) / gb)),
                        max(1, cpus // threads),
                        73,
                    )


def test_jobs_option_is_an_upper_bound_only():
    assert _plan(H200, jobs=4).env["MAX_JOBS"] == "4"
    p = _plan(RTX4090_WSL, jobs=64)
    assert int(p.env["MAX_JOBS"]) < 64 and [w.code for w in p.warnings] == ["BK103"]


def test_desktop_ampere_and_ada_use_the_sm80_kernels():
    assert _plan(RTX4090_WSL).archs == ["80"]
    assert _plan(A100).archs == ["80"] and _plan(A100).sizing.jobs == 73  # big box: one job per unit
    assert _plan(RTX4090_WSL, recipe=XF).env["TORCH_CUDA_ARCH_LIST"] == "8.9"
    assert _plan(H200, recipe=XF).env["TORCH_CUDA_ARCH_LIST"] == "9.0a"


def test_multi_arch_uses_nvcc_threads_and_more_memory_per_job():
    p = _plan(H200, archs=("8.0", "9.0", "12.0"))
    assert p.archs == ["80", "90", "120"] and p.env["FLASH_ATTN_CUDA_ARCHS"] == "80;90;120"
    assert p.env["NVCC_THREADS"] == "3" and p.sizing.gb_per_job == pytest.approx(12.0)
    assert p.sizing.jobs == 5  # 16 CPUs / 3 threads


def test_v100_with_cuda13_is_refused_not_compiled():
    for recipe in (FA, XF):
        p = _plan(V100_CUDA13, recipe=recipe)
        assert not p.ok
        assert [b.code for b in p.blockers] == ["BK002"]
        assert "7.0" in p.blockers[0].title


def test_refusals_for_broken_toolchains():
    assert [b.code for b in _plan(CPU_ONLY).blockers] == ["BK001", "BK008"]
    old = {**H200, "nvcc.version": "12.6"}
    assert [b.code for b in _plan({**old, "gpu.0.compute_capability": "12.0"}).blockers] == ["BK007"]
    assert [b.code for b in _plan(H200, recipe=XF, archs=("9.0",)).blockers] == []
    assert [b.code for b in _plan({**H200, "nvcc.version": "12.4"}, recipe=XF).blockers] == ["BK006"]
    assert [b.code for b in _plan({**H200, "torch.version": "2.9.1+cu128"}, recipe=XF).blockers] == ["BK004"]
    # an nvcc wrapper in /usr/local/bin makes torch pick CUDA_HOME=/usr/local: rule OD115 refuses the build
    wrapper = {
        **H200,
        "cuda.home": "/usr/local",
        "cuda.home_has_headers": False,
        "cuda.toolkit_root": "/usr/local/cuda-13.0",
    }
    p = plan_build(wrapper, FA, BuildRequest(package="flash-attn"), run_rules(wrapper, scope="install"))
    assert [b.code for b in p.blockers] == ["OD115"] and "CUDA_HOME" not in p.env
    assert [b.code for b in _plan({**H200, "nvcc.version": None}).blockers] == ["BK005"]


def test_install_scope_rule_errors_refuse_the_build():
    err = Finding(code="OD123", cause="x", severity="error", title="gcc too new for nvcc", message="m")
    warn = Finding(code="OD124", cause="x", severity="warning", title="w", message="m")
    p = plan_build(H200, FA, BuildRequest(package="flash-attn"), [err, warn])
    assert [b.code for b in p.blockers] == ["OD123"] and not p.ok
    assert [w.code for w in p.warnings] == ["OD124"]
    no_ninja = {**H200, "ninja.path": None, "ninja.version": None}  # the real rules: OD250 warns
    assert "OD250" in [w.code for w in _plan_with_rules(no_ninja).warnings]


def _plan_with_rules(facts):
    return plan_build(facts, FA, BuildRequest(package="flash-attn"), run_rules(facts, scope="install"))


def test_real_install_rules_are_quiet_on_the_h200_and_refuse_a_cuda_mismatch():
    assert _plan_with_rules(H200).ok
    mismatch = _plan_with_rules({**H200, "nvcc.version": "12.8"})
    assert "OD110" in [b.code for b in mismatch.blockers]


def test_cache_key_changes_with_torch_archs_python_and_subset():
    base = _plan(H200)
    assert _plan(dict(H200)).cache_digest == base.cache_digest  # deterministic
    for changed in (
        {"torch.version": "2.11.1+cu130"},
        {"torch.cuda": "12.8"},
        {"python.version": "3.11.9"},
        {"torch.cxx11abi": False},
        {"gpu.0.compute_capability": "8.0"},
    ):
        assert _plan({**H200, **changed}).cache_digest != base.cache_digest, changed
    assert _plan(H200, subset="olmo").cache_digest != base.cache_digest
    checkout = _plan(H200, source="/src/flash-attention", source_id="a")
    assert checkout.cache_digest != base.cache_digest
    assert _plan(H200, source="/src/flash-attention", source_id="b").cache_digest != checkout.cache_digest
    assert base.cache_key["python_abi"] == "cp312" and base.cache_key["archs"] == ["90"]


def test_plan_json_is_complete():
    j = _plan(H200, subset="olmo").to_json()
    for key in (
        "env",
        "argv",
        "max_jobs",
        "nvcc_threads",
        "translation_units",
        "predicted_peak_gb",
        "cache_key",
        "blockers",
        "source",
        "archs",
    ):
        assert key in j
    assert j["source"]["sha256"] == FA.sha256 and j["ok"] is True


def test_flash_attention_3_from_a_git_checkout(tmp_path) -> None:
    fa3 = find_recipe("flash-attn-3")
    p = plan_build(H200, fa3, BuildRequest(package="flash-attn-3", source="/src/flash-attention", subset="olmo"))
    assert p.ok and p.archs == ["90a"] and p.translation_units == 4
    assert p.argv[-1].endswith("/src/hopper")  # hopper/setup.py builds flash_attn_3
    assert p.env["FLASH_ATTENTION_OFFLINE_BUILD"] == "TRUE"  # never download a toolchain
    for flag in ("SM80", "FP16", "FP8", "HDIM64", "HDIM256", "SPLIT", "PAGEDKV", "SOFTCAP"):
        assert p.env[f"FLASH_ATTENTION_DISABLE_{flag}"] == "TRUE"
    assert "FLASH_ATTENTION_DISABLE_LOCAL" not in p.env and "FLASH_ATTENTION_DISABLE_BACKWARD" not in p.env
    assert "FLASH_ATTN_CUDA_ARCHS" not in p.env and "TORCH_CUDA_ARCH_LIST" not in p.env
    assert [b.code for b in plan_build(A100, fa3, BuildRequest(package="flash-attn-3")).blockers] == ["BK002"]
