"""The planner is pure: findings + installed packages + env file in, exactly what --apply would do out."""

from __future__ import annotations

from typing import Any

import pytest

from olmo_doctor.envplan import EnvVar
from olmo_doctor.errors import UsageError
from olmo_doctor.findings import Finding, Fix
from olmo_doctor.fix import envfile
from olmo_doctor.fix.plan import FixPlan, make_plan
from olmo_doctor.fix.pyenv import Dist, PyEnv

PY = "/proj/.venv/bin/python"


def env(prefix: str = "/proj/.venv", **dists: str) -> PyEnv:
    return PyEnv(PY, prefix, "/usr", "/site", "/site", "/proj/.venv/bin",
                 {k: Dist(k, v, None, "/site", None) for k, v in dists.items()})


def finding(code: str, *fixes: Fix, severity: str = "error") -> Finding:
    return Finding(code, "ninja_missing", severity, f"title {code}", "msg", list(fixes))  # type: ignore[arg-type]


def fix(grade: str, action: Any = None, title: str = "a fix") -> Fix:
    return Fix(title, grade, [f"cmd {title}"], action)  # type: ignore[arg-type]


def plan(findings: list[Finding], pyenv: PyEnv | None = None, recommended: dict[str, EnvVar] | None = None,
         env_text: str | None = None, facts: dict[str, Any] | None = None, **kw: Any) -> FixPlan:
    return make_plan(findings, recommended or {}, facts or {}, project="/proj", env=pyenv or env(),
                     env_text=env_text, **kw)


def by_status(p: FixPlan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in p.items:
        out.setdefault(item.status, []).append(item.op)
    return out


NINJA = {"op": "pip_install", "requirement": "ninja"}
TORCH = {"op": "reinstall_torch", "index": "cu128"}


def test_grades_decide_what_runs() -> None:
    fs = [finding("OD204", fix("safe", NINJA)), finding("OD101", fix("unsafe", TORCH), fix("manual")),
          finding("OD001", fix("manual", title="driver"))]
    p = plan(fs, env(torch="2.11.0+cu130"))
    assert by_status(p) == {"apply": ["pip_install"], "needs_unsafe": ["reinstall_torch"],
                            "manual": ["manual", "manual"]}
    item = p.to_run[0]
    assert item.argv == [PY, "-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "ninja"]
    with_unsafe = plan(fs, env(torch="2.11.0+cu130"), unsafe=True)
    torch = next(i for i in with_unsafe.to_run if i.op == "reinstall_torch")
    # the same release for the other index; a bare torch==2.11.0 would count +cu130 as satisfying it
    assert torch.argv is not None and torch.argv[-3:] == ["torch==2.11.0+cu128", "--index-url", "https://download.pytorch.org/whl/cu128"]


def test_every_allowed_fix_of_a_finding_runs_in_a_fixed_order() -> None:
    # like OD251: remove a broken ninja, then install it again; the install is not "already satisfied"
    f = finding("OD251", fix("safe", {"op": "pip_uninstall", "package": "ninja"}, "remove"),
                fix("safe", NINJA, "install again"), fix("unsafe", TORCH, "torch"), fix("manual", title="or this"))
    p = plan([f], env(ninja="1.11.1"))
    assert [(i.status, i.op) for i in p.items] == [("apply", "pip_uninstall"), ("apply", "pip_install"),
                                                    ("needs_unsafe", "reinstall_torch"), ("manual", "manual")]
    assert plan([f], env(ninja="1.11.1"), unsafe=True).count("apply") == 3
    # without the uninstall, the same install is already done
    assert plan([finding("OD250", fix("safe", NINJA))], env(ninja="1.11.1")).items[0].status == "done"


def test_a_value_the_facts_made_invalid_blocks_only_that_fix() -> None:
    bad = finding("OD101", fix("unsafe", {"op": "reinstall_torch", "index": "None"}))
    p = plan([bad, finding("OD204", fix("safe", NINJA))], unsafe=True)
    assert [(i.status, i.codes) for i in p.items] == [("apply", ["OD204"]), ("blocked", ["OD101"])]
    assert "PyTorch wheel index" in p.items[1].reason


def test_already_satisfied_is_done() -> None:
    fs = [finding("OD206", fix("safe", {"op": "pip_install", "requirement": "setuptools<82"})),
          finding("OD207", fix("safe", {"op": "pip_uninstall", "package": "ai2_olmo"})),
          finding("OD208", fix("unsafe", TORCH))]
    p = plan(fs, env(setuptools="80.9.0", torch="2.11.0+cu128"), unsafe=True)
    assert by_status(p) == {"done": ["pip_uninstall", "pip_install", "reinstall_torch"]}
    assert "80.9.0 already satisfies 'setuptools<82'" in " ".join(i.reason for i in p.items)
    p = plan(fs, env(setuptools="82.0.0", **{"ai2-olmo": "0.6.0"}, torch="2.11.0+cu130"), unsafe=True)
    assert by_status(p) == {"apply": ["pip_uninstall", "pip_install", "reinstall_torch"]}
    assert next(i for i in p.items if i.op == "pip_uninstall").backup == ["ai2-olmo"]


def test_outside_a_venv_pip_is_held_back_unless_unsafe() -> None:
    system = PyEnv("/usr/bin/python3", "/usr", "/usr", "/s", "/s", "/usr/bin", {})
    p = plan([finding("OD204", fix("safe", NINJA))], system)
    assert p.items[0].status == "needs_venv" and "not in a virtual environment" in p.items[0].reason
    p = plan([finding("OD204", fix("safe", NINJA))], system, unsafe=True)
    assert p.items[0].status == "apply" and p.items[0].applicability == "unsafe"


def test_env_file_item_merges_recommendations_and_env_actions() -> None:
    fs = [finding("OD210", fix("safe", {"op": "env_set", "name": "CUDA_HOME", "value": "/usr/local/cuda-13.0"})),
          finding("OD230", fix("safe", {"op": "ulimit", "resource": "nofile", "value": 1048576}))]
    rec = {"MAX_JOBS": EnvVar("8", "8 CPUs"), "CUDA_HOME": EnvVar("/wrong", "recommended")}
    p = plan(fs, recommended=rec, facts={"ulimit.nofile.hard": 65536})
    [item] = p.to_run
    assert item.op == "write_env_file" and item.codes == ["env", "OD210", "OD230"]
    assert item.path == envfile.ENV_FILE and item.content is not None
    ov = envfile.overlay(item.content)
    assert ov.set == {"MAX_JOBS": "8", "CUDA_HOME": "/usr/local/cuda-13.0"}  # the rule's fix wins
    assert ov.limits == {"nofile": "65536"} and "capped at the hard limit" in item.content
    again = plan(fs, recommended=rec, facts={"ulimit.nofile.hard": 65536}, env_text=item.content)
    assert again.items[0].status == "done" and not again.to_run


def test_only_filters_findings_and_env() -> None:
    fs = [finding("OD204", fix("safe", NINJA)), finding("OD206", fix("safe", {"op": "pip_install",
                                                                             "requirement": "wheel"}))]
    rec = {"MAX_JOBS": EnvVar("8", "8 CPUs")}
    assert [i.op for i in plan(fs, recommended=rec).to_run] == ["write_env_file", "pip_install", "pip_install"]
    only = plan(fs, recommended=rec, only=["od206"])
    assert [i.id for i in only.to_run] == ["pip_install:wheel"] and only.only == ["OD206"]
    assert [i.op for i in plan(fs, recommended=rec, only=["env"]).to_run] == ["write_env_file"]


def test_two_findings_one_command_runs_once() -> None:
    p = plan([finding("OD204", fix("safe", NINJA)), finding("OD209", fix("safe", NINJA))])
    assert len(p.to_run) == 1 and p.to_run[0].codes == ["OD204", "OD209"]


def test_invalid_rendered_action_is_a_usage_error_naming_the_rule() -> None:
    with pytest.raises(UsageError, match=r"OD299 fix 'a fix': unknown op 'curl'"):
        plan([finding("OD299", fix("safe", {"op": "curl", "url": "x"}))])
    with pytest.raises(UsageError, match=r"OD298 fix 'a fix'.*must be graded 'unsafe'"):
        plan([finding("OD298", fix("safe", {"op": "pip_install", "requirement": "torch==2.11"}))])


def test_unknown_fact_blocks_the_fix_instead_of_writing_it() -> None:
    p = plan([finding("OD210", fix("safe", {"op": "env_set", "name": "CUDA_HOME", "value": "unknown"}))])
    assert [i.status for i in p.items] == ["blocked"] and not p.to_run


def test_another_activated_venv_is_refused_not_guessed() -> None:
    other = PyEnv(PY, "/proj/.venv", "/usr", "/s", "/s", "/b", {}, active_venv="/home/u/other-venv")
    p = plan([finding("OD204", fix("safe", NINJA))], other, unsafe=True)
    assert p.items[0].status == "needs_venv" and "the active venv is /home/u/other-venv" in p.items[0].reason


def test_rebuild_is_blocked_without_build_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("olmo_doctor.fix.plan.build_kernels_available", lambda: False)
    p = plan([finding("OD240", fix("unsafe", {"op": "rebuild_kernel", "package": "flash-attn"}))], unsafe=True)
    assert p.items[0].status == "blocked" and "build-kernels is not available" in p.items[0].reason
    monkeypatch.setattr("olmo_doctor.fix.plan.build_kernels_available", lambda: True)
    p = plan([finding("OD240", fix("unsafe", {"op": "rebuild_kernel", "package": "flash-attn"}))], unsafe=True)
    assert p.to_run[0].argv == [PY, "-I", "-m", "olmo_doctor", "build-kernels", "--package", "flash-attn"]
    assert p.to_run[0].backup == ["flash-attn"]


def test_report_plans_use_the_reported_python() -> None:
    p = make_plan([finding("OD204", fix("safe", NINJA))], {}, {"python.executable": "/home/u/venv/bin/python"},
                  project="/proj", env=None, env_text=None, from_report="collect_env.txt")
    assert (p.to_run[0].argv or [])[0] == "/home/u/venv/bin/python" and "on that machine" in p.to_run[0].reason
