"""The recipes' memory figures reproduce every build peak measured so far within +-25% (the plan's own target),
at the job counts and split choices those builds ran with. Measurements: bench/RESULTS.md and recipes/README.md
(H200 host: 16 vCPUs, 128 GB; dev box: 2 cores, 24 GB; nvcc 13.0, sm_90/sm_90a)."""

from __future__ import annotations

import pytest

from olmo_doctor.build.plan import BuildRequest, peak_gb, plan_build
from olmo_doctor.build.recipes import find_recipe
from tests.machines import CPU_ONLY, H200

BAND = 0.25
# (package, subset, machine, MAX_JOBS bound, split expected, measured peaks in GB, where)
MEASURED = [
    ("flash-attn", "olmo", H200, 12, True, (37.1, 37.4, 37.75, 39.9, 38.44),
     "H200 split runs 6/7, kernels-all runs 2/3 and wave3"),
    ("flash-attn", "olmo", H200, 7, False, (26.0, 25.9, 26.3), "H200 runs 1-3, 7 whole units"),
    ("flash-attn", "olmo", CPU_ONLY, 2, False, (8.21,), "dev box, MAX_JOBS 2"),
    ("flash-attn-3", "olmo", H200, 4, False, (11.73, 12.4), "H200 kernels-all runs 2/3, 4 whole units"),
    ("flash-attn-3", "olmo", H200, 7, True, (20.12,), "H200 wave3: backward split by branch, 7 jobs"),
    ("xformers", None, H200, 6, False, (6.15,), "H200 wave3, full build on 6 slots"),
    ("xformers", None, H200, 12, False, (6.15, 6.2), "H200 kernels-all runs 2/3, full build"),
    ("xformers", None, CPU_ONLY, 2, False, (6.1,), "dev box, MAX_JOBS 2"),
]


@pytest.mark.parametrize("package,subset,facts,jobs,split,peaks,where", MEASURED,
                         ids=[f"{m[0]}-{m[3]}jobs" for m in MEASURED])
def test_the_plan_predicts_each_measured_peak_within_25_percent(package, subset, facts, jobs, split, peaks, where):
    recipe = find_recipe(package)
    plan = plan_build(facts, recipe, BuildRequest(package=package, subset=subset, jobs=jobs, archs=("9.0",),
                                                  work_root="/cache"))
    assert plan.sizing.jobs == jobs and plan.split_branches == split, where
    for peak in peaks:
        assert abs(peak / plan.predicted_peak_gb - 1) <= BAND, f"{where}: {peak} GB vs plan {plan.predicted_peak_gb}"


def test_fa3_splits_its_backward_file_where_every_long_job_runs_at_once():
    fa3 = find_recipe("flash-attn-3")
    wide = plan_build(H200, fa3, BuildRequest(package="flash-attn-3", subset="olmo", work_root="/cache"))
    assert wide.split_branches and wide.compile_jobs == 7 and wide.sizing.jobs == 7
    narrow = plan_build(H200, fa3, BuildRequest(package="flash-attn-3", subset="olmo", jobs=4, work_root="/cache"))
    assert not narrow.split_branches and narrow.compile_jobs == 4
    assert wide.cache_digest != narrow.cache_digest  # a different build, a different wheel


def test_peak_model_is_the_heaviest_job_plus_the_others_share():
    assert peak_gb(1, 6.3, 2.8) == pytest.approx(7.3)  # one job: the reserve and that job
    assert peak_gb(12, 6.3, 2.8) == pytest.approx(1 + 6.3 + 11 * 2.8)
    assert peak_gb(3, 4.0, 4.0) == pytest.approx(13.0)  # others as heavy as the heaviest: jobs x peak + reserve
