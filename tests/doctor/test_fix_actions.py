"""Fix actions are a closed set, validated strictly when rules load and again after rendering."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fix_sandbox import write_rules

from olmo_doctor.rules.actions import (
    ActionError,
    ActionUnresolved,
    EnvSet,
    PipInstall,
    PipUninstall,
    RebuildKernel,
    ReinstallTorch,
    Ulimit,
    action_error,
    parse_action,
    parse_actions,
    touches_compiled,
)
from olmo_doctor.rules.engine import run_rules
from olmo_doctor.rules.model import RuleError, load_rules


def test_each_op_parses_to_its_type() -> None:
    assert parse_action({"op": "env_set", "name": "CUDA_HOME", "value": "/usr/local/cuda"}, "OD1") == EnvSet(
        "CUDA_HOME", "/usr/local/cuda")
    assert parse_action({"op": "ulimit", "resource": "nofile", "value": 65536}, "OD1") == Ulimit("nofile", "65536")
    pip = parse_action({"op": "pip_install", "requirement": "setuptools<82"}, "x")
    assert isinstance(pip, PipInstall) and pip.package == "setuptools"
    assert parse_action({"op": "pip_uninstall", "package": "ai2-olmo"}, "x") == PipUninstall("ai2-olmo")
    assert parse_action({"op": "rebuild_kernel", "package": "xformers"}, "x") == RebuildKernel("xformers")
    torch = parse_action({"op": "reinstall_torch", "index": "cu128"}, "x")
    assert torch == ReinstallTorch("cu128") and torch.url == "https://download.pytorch.org/whl/cu128"
    two = parse_actions([{"op": "env_unset", "name": "A"}, {"op": "env_unset", "name": "B"}], "x")
    assert [a.describe() for a in two] == ["unset A", "unset B"]


@pytest.mark.parametrize(("raw", "needle"), [
    ({"op": "shell", "command": "rm -rf /"}, "unknown op 'shell'"),
    ({"op": "env_set", "name": "X"}, "needs value"),
    ({"op": "pip_install", "requirement": "ninja", "index": "x"}, "unknown field(s) index"),
    ({"op": "ulimit", "resource": "stack", "value": "hard"}, "resource must be one of nofile, memlock"),
    ({"op": "ulimit", "resource": "nofile", "value": -1}, "positive number"),
    ({"op": "rebuild_kernel", "package": "apex"}, "flash-attn, xformers"),
    ({"op": "reinstall_torch", "index": "https://evil.example/simple"}, "PyTorch wheel index"),
    ({"op": "pip_install", "requirement": "ninja @ https://x.example/ninja.whl"}, "is a URL"),
    ({"op": "pip_install", "requirement": "ninja; rm -rf /"}, "not a valid requirement"),
    ({"op": "pip_install", "requirement": "pip>=25"}, "never changes pip"),
    ({"op": "pip_uninstall", "package": "pip"}, "never removes pip"),
    ({"op": "env_set", "name": "A B", "value": "1"}, "not an environment variable name"),
    ("pip install ninja", "must be a table"),
])
def test_invalid_actions_name_the_rule(raw: object, needle: str) -> None:
    with pytest.raises(ActionError) as err:
        parse_action(raw, "OD204 fix 'Install ninja'")
    assert str(err.value).startswith("OD204 fix 'Install ninja': ") and needle in str(err.value)


def test_grading_replacing_compiled_code_must_be_unsafe() -> None:
    assert "must be 'unsafe'" in (action_error({"op": "reinstall_torch", "index": "cu128"}, "safe") or "")
    assert "must be 'unsafe'" in (action_error({"op": "pip_install", "requirement": "flash-attn==2.8.3"}, "safe")
                                  or "")
    assert action_error({"op": "reinstall_torch", "index": "cu128"}, "unsafe") is None
    assert touches_compiled(PipUninstall("xformers")) and not touches_compiled(PipInstall("ninja"))


def test_templates_pass_the_loader_and_unknown_facts_block_the_action() -> None:
    raw = {"op": "env_set", "name": "CUDA_HOME", "value": "{cuda.toolkit_root}"}
    assert action_error(raw) is None  # the value is a template: checked after rendering
    assert "literal variable name" in (action_error({"op": "env_set", "name": "{x}", "value": "1"}) or "")
    with pytest.raises(ActionUnresolved, match="did not report"):
        parse_action({"op": "env_set", "name": "CUDA_HOME", "value": "unknown"}, "OD210")


def test_rule_loader_rejects_invalid_actions(tmp_path: Path) -> None:
    folder = write_rules(tmp_path / "rules", ["OD902"])
    path = folder / "OD902-test-pip-install.toml"
    path.write_text(path.read_text().replace('op = "pip_install"', 'op = "pip_instal"'))
    with pytest.raises(RuleError, match=r"OD902-test-pip-install.toml: fix\[0\].action: unknown op 'pip_instal'"):
        load_rules(folder)


def test_rule_loader_rejects_a_safe_torch_reinstall(tmp_path: Path) -> None:
    folder = write_rules(tmp_path / "rules", ["OD907"])
    path = folder / "OD907-test-torch.toml"
    path.write_text(path.read_text().replace('applicability = "unsafe"', 'applicability = "safe"'))
    with pytest.raises(RuleError, match="must be 'unsafe'"):
        load_rules(folder)


def test_engine_renders_action_templates(tmp_path: Path) -> None:
    rules = load_rules(write_rules(tmp_path / "rules", ["OD901"]))
    findings = run_rules({"test.toolkit": "/usr/local/cuda-13.0", "env.OLMO_FIX_HOME": None}, rules=rules)
    assert [f.code for f in findings] == ["OD901"]
    action = parse_actions(findings[0].fixes[0].action, "OD901")
    assert action == [EnvSet("OLMO_FIX_HOME", "/usr/local/cuda-13.0")]
