"""The toolchain rules (OD1xx) judged on whole machines: the real H200 capture must be clean, known-bad
machines must get the right error, and a CPU-only dev box must get none. Plus the table helpers they call."""

from __future__ import annotations

import warnings

import pytest

from olmo_doctor.compat import nvcc, wheels
from olmo_doctor.facts import Facts
from olmo_doctor.findings import Finding
from olmo_doctor.rules.actions import OPS
from olmo_doctor.rules.engine import fires, run_rules, to_finding
from olmo_doctor.rules.expr import compile_expr
from olmo_doctor.rules.model import load_rules
from tests.machines import CPU_DEV, H200

TOOLCHAIN = tuple(r for r in load_rules() if r.code.startswith("OD1"))




def _codes(findings: list[Finding], severity: str | None = None) -> set[str]:
    return {f.code for f in findings if severity is None or f.severity == severity}


def test_h200_capture_has_no_error_from_toolchain_rules() -> None:
    findings = run_rules(H200, rules=TOOLCHAIN)
    assert not _codes(findings, "error"), [f.title for f in findings]
    assert not _codes(findings, "warning"), [f.title for f in findings]


def test_v100_with_cuda13_gets_the_pre_turing_errors() -> None:
    facts = {
        **H200,
        "gpu.0.name": "Tesla V100-SXM2-32GB",
        "gpu.0.compute_capability": "7.0",
        "env.TORCH_CUDA_ARCH_LIST": "7.0",
    }
    findings = run_rules(facts, scope="install", rules=TOOLCHAIN)
    errors = _codes(findings, "error")
    assert {"OD135", "OD136", "OD140"} <= errors
    dropped = next(f for f in findings if f.code == "OD135")
    assert dropped.cause == "nvcc_dropped_old_arch"
    assert "sm_70" in dropped.message and "12.9" in dropped.message
    # the torch fix goes back to the cu126 wheels, which still carry sm_70
    torch_fix = next(f for f in findings if f.code == "OD140").fixes[0]
    assert torch_fix.action == {"op": "reinstall_torch", "index": "cu126"}


def test_v100_report_without_arch_list_still_gets_the_torch_error() -> None:
    facts = {k: v for k, v in H200.items() if k != "torch.arch_list"}
    facts.update({"gpu.0.name": "Tesla V100-SXM2-32GB", "gpu.0.compute_capability": "7.0"})
    assert "OD141" in _codes(run_rules(facts, rules=TOOLCHAIN), "error")


def test_rtx5090_with_nvcc_12_6_gets_the_nvcc_too_old_for_arch_error() -> None:
    facts = {
        **H200,
        "gpu.0.name": "NVIDIA GeForce RTX 5090",
        "gpu.0.compute_capability": "12.0",
        "nvcc.version": "12.6",
        "nvcc.path": "/usr/local/cuda-12.6/bin/nvcc",
        "cuda.home_nvcc_version": "12.6",
        "nvcc.max_gcc": 13,
        "torch.version": "2.7.1+cu126",
        "torch.cuda": "12.6",
        "torch.arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
        "env.TORCH_CUDA_ARCH_LIST": "12.0",
    }
    findings = run_rules(facts, scope="install", rules=TOOLCHAIN)
    errors = _codes(findings, "error")
    assert {"OD130", "OD131", "OD140"} <= errors
    too_old = next(f for f in findings if f.code == "OD130")
    assert too_old.cause == "nvcc_too_old_for_arch"
    assert "12.8" in too_old.message and "compute_120" in too_old.message


def test_cpu_dev_machine_gets_no_error_for_either_scope() -> None:
    for scope in ("install", "train"):
        assert not _codes(run_rules(CPU_DEV, scope=scope, rules=TOOLCHAIN), "error")
    # but the CUDA_HOME wrapper problem is pointed out, with a safe fix
    warning = next(f for f in run_rules(CPU_DEV, rules=TOOLCHAIN) if f.code == "OD116")
    assert warning.fixes[0].action == {"op": "env_set", "name": "CUDA_HOME", "value": "/usr/local/cuda-13.0"}


def test_unknown_facts_keep_every_toolchain_rule_quiet() -> None:
    assert run_rules({}, rules=TOOLCHAIN) == []
    assert run_rules({"gpu.count": 0}, rules=TOOLCHAIN) == []


@pytest.mark.parametrize(
    ("driver", "cuda", "expected"),
    [
        ("535.104.05", "13.0", "OD101"),  # below the 13.x floor: error
        ("550.54.14", "12.8", "OD102"),  # 12.x floor met, 12.8 GA not: warning
        ("580.159.04", "13.0", None),
        ("410.48", None, "OD105"),  # no current wheel runs on it; OD104 (pre-CUDA 11) nested beneath
    ],
)
def test_driver_floor_grades(driver: str, cuda: str | None, expected: str | None) -> None:
    facts: Facts = {"driver.version": driver, "torch.version": "2.11.0", "torch.cuda": cuda}
    findings = run_rules(facts, rules=TOOLCHAIN)
    assert {f.code for f in findings if not f.root} == ({expected} if expected else set())
    assert all(f.root == expected for f in findings if f.code != expected)


def test_every_firing_case_renders_its_fix_actions() -> None:
    for rule in TOOLCHAIN:
        for case in rule.cases:
            fired, extra, bound = fires(rule, case.facts)
            if not fired:
                continue
            finding = to_finding(rule, bound, extra)
            assert "unknown" not in finding.title, (rule.code, finding.title)
            for fix in finding.fixes:
                assert fix.action is None or "unknown" not in str(fix.action), (rule.code, fix.action)


def test_conditions_compile_without_warnings() -> None:
    compile_expr.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rule in TOOLCHAIN:
            if rule.when:
                compile_expr(rule.when)


def test_toolchain_rules_have_sources_and_signatures() -> None:
    assert len(TOOLCHAIN) >= 22
    for rule in TOOLCHAIN:
        assert all(s.startswith("https://") for s in rule.sources), rule.code
    causes_with_signatures = {r.cause for r in TOOLCHAIN if r.signatures}
    for cause in {r.cause for r in TOOLCHAIN}:
        assert cause in causes_with_signatures, f"no log signature for {cause}"


def test_cuda_arch_list_parses_torch_syntax() -> None:
    assert nvcc.cuda_arch_list("9.0a") == ["sm_90a"]
    assert nvcc.cuda_arch_list("8.0;8.6+PTX") == ["sm_80", "sm_86", "compute_86"]
    assert nvcc.cuda_arch_list("7.5 8.0") == ["sm_75", "sm_80"]
    assert nvcc.cuda_arch_list("Hopper") == ["sm_90", "compute_90"]
    assert nvcc.cuda_arch_list("nonsense") is None


def test_nvcc_arch_split_separates_too_new_from_dropped() -> None:
    assert nvcc.nvcc_arch_split("13.0", ["sm_70", "sm_80", "sm_90a", "sm_120"]) == ([], ["7.0"])
    too_new, dropped = nvcc.nvcc_arch_split("12.6", ["sm_35", "sm_90a", "sm_100", "sm_120"]) or ([], [])
    assert (too_new, dropped) == (["10.0", "12.0"], ["3.5"])
    assert nvcc.nvcc_arch_split("11.8", ["sm_90a"]) == (["9.0a"], [])
    assert nvcc.nvcc_arch_split("12.8", ["sm_100f"]) == (["10.0f"], [])
    # below the table only sm_89 and newer are known to be too new
    assert nvcc.nvcc_arch_split("11.7", ["sm_80", "sm_90"]) == (["9.0"], [])


def test_glibcxx_and_torch_index_for_cuda() -> None:
    assert nvcc.glibcxx_for_gcc("13.3.0") == "3.4.32"
    assert nvcc.glibcxx_for_gcc("12.2.0") == "3.4.30"
    assert nvcc.glibcxx_for_gcc("8.5.0") is None
    assert wheels.torch_index_for_cuda("12.4") == "cu126"
    assert wheels.torch_index_for_cuda("13.1") == "cu130"
    assert wheels.torch_index_for_cuda("12.9") == "cu128" and wheels.torch_index_for_cuda("11.8") == "cu118"
    assert wheels.torch_index_for_cuda("10.2") is None
    assert nvcc.last_nvcc_for_cc("7.0") == "12.9"  # CUDA 13.0 removed Volta
    assert nvcc.last_nvcc_for_cc("3.7") == "11.8"  # CUDA 12.0 removed Kepler


def test_fix_actions_come_from_the_closed_set() -> None:
    """Only the schema's ops (olmo_doctor/rules/actions.py OPS), with exactly their fields."""
    for rule in TOOLCHAIN:
        for fix in rule.fixes:
            if fix.applicability == "manual":
                assert fix.action is None, rule.code
                continue
            assert fix.action is not None, rule.code
            op = fix.action.get("op")
            assert op in OPS, (rule.code, op)
            assert set(fix.action) - {"op"} == set(OPS[op]), (rule.code, fix.action)
            # replacing torch or a compiled kernel is never 'safe'
            replaces = op in ("reinstall_torch", "rebuild_kernel", "pip_uninstall")
            if replaces or str(fix.action.get("requirement", "")).startswith("torch"):
                assert fix.applicability == "unsafe", rule.code
