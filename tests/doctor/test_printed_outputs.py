"""What `explain` and `check` print is what it means: no template field left unrendered, every printed fix command
parses in bash and reaches its program as the words it shows (a command quoted twice is one word that names no
program), no safe fix serves a package that clashes with the trainer, and `--device` reaches every node's check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import case_findings
from typer.testing import CliRunner

from olmo_doctor.cli import app
from olmo_doctor.commands.explain import explain_lines
from olmo_doctor.errors import UsageError
from olmo_doctor.rules.engine import fields, placeholder_name, run_rules
from olmo_doctor.rules.model import load_rules
from tests.helpers import FIXTURES

RULES = load_rules()
runner = CliRunner()
BASH = shutil.which("bash")


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_explain_renders_every_field(rule: Any) -> None:
    """`explain` shows each field as a named placeholder and says what fills it: never `{driver.version}`."""
    text = "\n".join(explain_lines(rule))
    templates = [rule.title, *(f.title for f in rule.fixes), *(c for f in rule.fixes for c in f.commands)]
    for template in templates:
        for name in fields(template):
            assert "{" + name not in text, f"{rule.code}: unrendered {{{name}}}"
            shown = placeholder_name(name.replace("gpu.*.", "gpu_star."))
            assert shown in text, f"{rule.code}: no placeholder {shown} for {name}"
    if any(fields(t) for t in templates):
        assert "Values (filled from the machine's facts" in text


def test_explain_od105_shows_a_placeholder_and_an_example() -> None:
    res = runner.invoke(app, ["explain", "OD105"])
    assert res.exit_code == 0 and "{driver.version}" not in res.stdout
    assert "NVIDIA driver <driver.version> runs no torch wheel" in res.stdout
    assert "e.g. NVIDIA driver 470.57.02" in res.stdout  # the rule's own firing case, rendered
    assert "<driver.version>: NVIDIA kernel driver version" in res.stdout


COMMANDS = [(rule.code, i, cmd) for rule in RULES for i, case in enumerate(rule.cases) if case.fires
            for finding in case_findings(rule, case) for fix in finding.fixes for cmd in fix.commands]
# bash runs these itself (argv does not reach a program); everything else is recorded, never run
BUILTINS = {"export", "unset", "ulimit", "echo", "cd", "source", ".", "eval", "set", "printf", "true", "read"}


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_every_printed_command_parses_in_bash() -> None:
    """A `<value to fill in>` (a manual fix's placeholder, `<interface>`) is the only thing a user must change
    before pasting: with each one filled in, every command parses."""
    bad = []
    for code, index, cmd in COMMANDS:
        filled = re.sub(r"<[\w|., -]{1,60}>", "X", cmd)
        proc = subprocess.run([BASH, "-n", "-c", filled], capture_output=True, text=True)
        if proc.returncode:
            bad.append(f"{code} case {index}: {cmd!r}: {proc.stderr.strip()}")
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_every_printed_command_reaches_its_program_as_words(tmp_path: Path) -> None:
    """Each command runs in bash with an empty PATH, so every program it names is "not found" and bash hands its
    argv to a recorder instead: the program's name is one word (a command quoted twice arrives as one long word
    with spaces in it), and builtins aside, nothing runs."""
    log = tmp_path / "argv"
    recorder = f'command_not_found_handle() {{ printf "%s\\x1f" "$@" >> {log}; printf "\\n" >> {log}; return 0; }}'
    bad = []
    for code, index, cmd in COMMANDS:
        log.write_text("")
        env = {"PATH": str(tmp_path / "empty"), "HOME": str(tmp_path), "LANG": "C"}
        subprocess.run([BASH, "-c", f"{recorder}\n{cmd}"], cwd=tmp_path, env=env, capture_output=True, timeout=10)
        for line in log.read_text().splitlines():
            argv = line.split("\x1f")[:-1]
            if argv and (not argv[0] or any(c.isspace() for c in argv[0]) or "'" in argv[0]):
                bad.append(f"{code} case {index}: {cmd!r} runs {argv[0]!r}")
    assert not bad, "\n".join(bad)


def test_unmet_requirements_reach_pip_as_separate_words(tmp_path: Path) -> None:
    """OD206's fix names each requirement as its own argument, quoted once (`pip install 'numpy<2' 'x>=1'`)."""
    facts = {"python.unmet_requirements": ["torch 2.11.0 requires setuptools>=77.0.3; has 69.5.1",
                                           "olmo-doctor 0.1.0 requires numpy<3,>=1.26; has 3.1.0"]}
    [finding] = [f for f in run_rules(facts) if f.code == "OD206"]
    [cmd] = finding.fixes[0].commands
    assert cmd == "pip install 'setuptools>=77.0.3' 'numpy<3,>=1.26'"
    if BASH:
        out = subprocess.run([BASH, "-c", f"pip() {{ printf '%s|' \"$@\"; }}; {cmd}"], capture_output=True,
                             text=True).stdout
        assert out == "install|setuptools>=77.0.3|numpy<3,>=1.26|"


CLASH = {"olmo.module_origin": "ai2-olmo",
         "python.unmet_requirements": ["ai2-olmo 0.6.0 requires numpy<2; has 2.1.0",
                                       "ai2-olmo 0.6.0 requires cached-path>=1.6.2; missing"]}


def test_a_package_clashing_with_the_trainer_is_an_error_and_never_served() -> None:
    """ai2-olmo installed: check says so as an error, and offers no safe fix that would satisfy ai2-olmo's own
    requirements (numpy<2 would downgrade the trainer's numpy to serve the package that breaks it)."""
    found = run_rules(CLASH, scope="all")
    codes = {f.code: f for f in found}
    assert codes["OD260"].severity == "error"
    safe = [c for f in found for fix in f.fixes if fix.applicability == "safe" for c in fix.commands]
    assert not any("numpy" in c or "cached-path" in c for c in safe), safe
    assert "OD207" not in codes


def test_another_packages_needs_are_still_served_next_to_a_clash() -> None:
    facts = {**CLASH, "python.unmet_requirements": [*CLASH["python.unmet_requirements"],
                                                    "sphinx 7.0.0 requires docutils<0.21; has 0.21.2"]}
    [finding] = [f for f in run_rules(facts) if f.code == "OD207"]
    assert finding.fixes[0].commands == ["pip install 'docutils<0.21'"]


def test_ai2_olmo_written_into_our_folder_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip writes ai2-olmo's olmo/ files over ours (same site-packages): `import olmo` still resolves to our folder,
    but ai2-olmo's RECORD owns it, so the clash is named."""
    from olmo_doctor.probes import python_env

    site = tmp_path / "site-packages"
    (site / "olmo").mkdir(parents=True)
    (site / "olmo" / "__init__.py").write_text("")
    info = site / "ai2_olmo-0.6.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("olmo/__init__.py,,\nolmo/train.py,,\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert python_env.olmo_owners() == ["ai2-olmo"]
    assert python_env._installed_here("ai2-olmo", site)
    assert not python_env._installed_here("ai2-olmo", tmp_path)


def _compare(*extra: str) -> dict[str, Any]:
    res = runner.invoke(app, ["compare", str(FIXTURES / "fleet"), "--scope", "train", "--json", *extra])
    return json.loads(res.stdout)


def test_compare_honours_device_cpu_in_every_nodes_health() -> None:
    """A GPU problem (no GPU that torch can use, say) is an error of a GPU plan, not of `--device cpu`."""
    def node_codes(data: dict[str, Any]) -> dict[str, set[str]]:
        return {n: {f["code"] for f in fs} for n, fs in data["health"].items()}

    nodes = {p.stem: json.loads(p.read_text()) for p in sorted((FIXTURES / "fleet").glob("*.json"))}
    for facts in nodes.values():  # every node: torch sees no GPU
        facts["facts"]["torch.cuda_available"] = False
    assert nodes
    gpu_only = {"OD005", "OD001"}
    from olmo_doctor.fleet.verdict import judge
    from olmo_doctor.report import load_report

    loaded = {n: load_report(FIXTURES / "fleet" / f"{n}.json") for n in nodes}
    for facts in loaded.values():
        facts["torch.cuda_available"] = False
    cuda = judge(loaded, scope="train")
    cpu = judge(loaded, scope="train", plan_device="cpu")
    assert any(gpu_only & {f.code for f in fs} for fs in cuda.health.values())
    assert not any(gpu_only & {f.code for f in fs} for fs in cpu.health.values())
    through_cli = node_codes(_compare("--device", "cpu"))
    assert set(through_cli) == set(nodes) and not any(gpu_only & codes for codes in through_cli.values())
    res = runner.invoke(app, ["compare", str(FIXTURES / "fleet"), "--device", "tpu"])
    assert isinstance(res.exception, UsageError) and "unknown device 'tpu'" in str(res.exception)


def test_check_fleet_passes_device_to_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo_doctor.fleet import launch

    seen: list[object] = []
    monkeypatch.setattr(launch, "run", lambda *a, **k: seen.append(a[5] if len(a) > 5 else k.get("plan_device"))
                        or 0)
    res = runner.invoke(app, ["check", "--fleet", "--device", "cpu", "--scope", "train"])
    assert res.exit_code == 0 and seen == ["cpu"]
    res = runner.invoke(app, ["check", "--fleet", "--device", "tpu"])
    assert isinstance(res.exception, UsageError) and "unknown device 'tpu'" in str(res.exception)
