"""Attacks through values: a fact value must never become shell code.

Every payload tries to create a marker file when the output is evaluated. We evaluate what olmo-doctor prints
(`env` in each format, `.olmo-doctor/env.sh`, the fix commands `check` prints) in real shells (bash, zsh, dash and,
where fish reads it, fish: tests/shells.py) and assert the marker does not exist, and, where the value is
printable, that it arrives in the shell as the same string.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from olmo_doctor.api import run_check
from olmo_doctor.cli import app
from olmo_doctor.commands.env import FORMATS, format_env
from olmo_doctor.envplan import EnvVar
from olmo_doctor.facts import clean
from olmo_doctor.fix import envfile
from olmo_doctor.report import load_report
from olmo_doctor.rules.actions import EnvSet, parse_action
from olmo_doctor.rules.engine import render
from olmo_doctor.shell import UnsafeValue, comment, env_line, fill, has_control, quote
from tests import shells
from tests.machines import H200_CAPTURE


def payloads(marker: Path) -> list[str]:
    """Ways out of a quoted word or a comment; each writes `marker` with a shell builtin (no PATH needed)."""
    m = str(marker)
    return [
        f"x\necho pwned > {m}", f"x\recho pwned > {m}", f"x\r\necho pwned > {m}", f"$(echo pwned > {m})",
        f"`echo pwned > {m}`", f"x; echo pwned > {m}", f"x' ; echo pwned > {m}; echo '",
        f'x" ; echo pwned > {m}; echo "', f"x\u2028echo pwned > {m}", f"x\u2029echo pwned > {m}",
        f"x\u0085echo pwned > {m}", f"x\x00\necho pwned > {m}", f"x\x1b]0;t\x07\necho pwned > {m}",
        f"x && echo pwned > {m}", f"x | echo pwned > {m}", f"x\\\necho pwned > {m}", f"x\\'; echo pwned > {m} #",
        f"${{HOME:+$(echo pwned > {m})}}", f"x\x0b\x0c\necho pwned > {m}", f"x\x7f\necho pwned > {m}",
        f"x\u202e\necho pwned > {m}", f"'\"$(echo pwned > {m})\"'", f"x # \necho pwned > {m}", f"x\techo pwned > {m}",
        f"/opt/cuda-13.0'$(echo pwned > {m})'/", f"ünïcødé $(echo pwned > {m})",
        # ends fish's single quotes where POSIX quoting puts \' (fish reads it as an escaped quote, POSIX as two
        # characters), so it runs in fish if a value is quoted for bash: test_fish_check_can_fail
        f"\\''; echo pwned > {m}; echo \\'", f"x\\'; echo pwned > {m} #",
    ]


@pytest.mark.parametrize("shell", shells.POSIX)
@pytest.mark.parametrize("fmt", ["bash", "dotenv"])
def test_env_lines_never_run_a_value(tmp_path: Path, fmt: str, shell: str) -> None:
    marker = tmp_path / "marker"
    for payload in payloads(marker):
        text = format_env({"CUDA_HOME": EnvVar(payload, f"reason {payload}"), "MAX_JOBS": EnvVar("4", payload)}, fmt)
        # eval "$(olmo-doctor env)" and `set -a; . ./.env`
        script = 'eval "$1"; printf %s "$CUDA_HOME"' if fmt == "bash" else 'set -a; . ./e.env; printf %s "$CUDA_HOME"'
        (tmp_path / "e.env").write_text(text + "\n")
        proc = shells.run(shell, script, tmp_path, arg=text)
        assert not marker.exists(), (fmt, payload, text)
        if not has_control(payload):
            assert proc.stdout == payload, (fmt, payload, text, proc.stderr)
        assert all(has_control(line) is False for line in text.splitlines()), text


def _fish_source(tmp_path: Path, text: str) -> str:
    """`olmo-doctor env --format fish | source`, then print the value: the printf runs after the sourced line, so
    a value that escaped its quotes would run where it stands, before the line's reason comment."""
    (tmp_path / "e.fish").write_text(text + "\n")
    return shells.run("fish", 'source ./e.fish; printf %s "$CUDA_HOME"', tmp_path).stdout


def test_fish_lines_never_run_a_value(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for payload in payloads(marker):
        text = format_env({"CUDA_HOME": EnvVar(payload, payload)}, "fish")
        assert len(text.splitlines()) == 1 and not has_control(text)
        if not has_control(payload):  # fish's quoting: one single-quoted word with \\ and \' escaped
            word = text.split(" ", 3)[3].split("  # ")[0]
            assert word.startswith("'") and word.endswith("'") and not has_control(word)
            assert word[1:-1].replace("\\\\", "").replace("\\'", "").count("'") == 0
        out = _fish_source(tmp_path, text)
        assert not marker.exists(), (payload, text)
        if not has_control(payload):
            assert out == payload, (payload, text)


def test_fish_check_can_fail(tmp_path: Path) -> None:
    """The fish test runs the payload where fish would execute it: quoted for bash instead, it does run."""
    marker = tmp_path / "marker"
    payload = f"\\''; echo pwned > {marker}; echo \\'"
    _fish_source(tmp_path, f"set -gx CUDA_HOME {shlex.quote(payload)}  # why")
    assert marker.exists()
    marker.unlink()
    assert _fish_source(tmp_path, env_line("CUDA_HOME", payload, "why", "fish")) == payload
    assert not marker.exists()


def test_quote_refuses_control_characters_and_comment_stays_one_line() -> None:
    for bad in ("a\nb", "a\rb", "a\x00b", "a\x1bb", "a\u2028b", "a\u0085b", "a\u202eb"):
        for shell in ("bash", "fish", "dotenv"):
            with pytest.raises(UnsafeValue):
                quote(bad, shell)
        assert "\n" not in comment(bad) and not has_control(comment(bad))
    with pytest.raises(UnsafeValue):
        env_line("A;B", "x")
    assert quote("/usr/local/cuda-13.0") == "/usr/local/cuda-13.0"  # plain values print as written


def test_env_sh_never_runs_a_value(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for payload in payloads(marker):
        try:
            entry = envfile.entry(EnvSet("CUDA_HOME", payload), f"OD115 {payload}")
        except UnsafeValue:
            assert has_control(payload)
            entry = envfile.entry(EnvSet("CUDA_HOME", "safe"), f"OD115 {payload}")
        text = envfile.updated(None, [entry])
        (tmp_path / "env.sh").write_text(text)
        for shell in shells.POSIX:
            proc = shells.run(shell, '. ./env.sh; printf %s "$CUDA_HOME"', tmp_path)
            assert not marker.exists(), (shell, payload, text)
            assert proc.stdout == (payload if not has_control(payload) else "safe"), (shell, proc.stderr)
        assert envfile.parse(text).entries[0].statement == entry.statement  # the block reads back the same


def test_actions_refuse_control_characters() -> None:
    for value in ("x\ny", "x\x00", "x\u2028y"):
        with pytest.raises(ValueError):
            parse_action({"op": "env_set", "name": "CUDA_HOME", "value": value}, "OD115")
    assert "\n" not in EnvSet("CUDA_HOME", "a b$(c)").describe()


def test_facts_with_control_characters_become_unknown() -> None:
    facts = clean({"gpu.0.name": "NVIDIA\nrm -rf ~", "cuda.home": "/usr/local/cuda", "gcc.alternatives":
                   ["12:/usr/bin/g++-12", "13:/x\x1b[2J"], "os.name": "Ubuntu\u2028x", "odd\nkey": "v",
                   "cpu.count": 4, "torch.version": "2.11.0\x00"})
    assert facts["gpu.0.name"] is None and facts["gcc.alternatives"] is None and facts["os.name"] is None
    assert facts["torch.version"] is None
    assert facts["cuda.home"] == "/usr/local/cuda" and facts["cpu.count"] == 4
    assert not any(has_control(k) for k in facts)
    refused = facts["facts.refused"]
    assert isinstance(refused, list) and {"gpu.0.name", "gcc.alternatives", "os.name", "torch.version"} <= set(
        refused) and all(not has_control(k) for k in refused)


def test_environment_values_are_refused_as_facts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from olmo_doctor.probes import collect
    from olmo_doctor.run import FakeRunner

    monkeypatch.setenv("CUDA_HOME", f"/opt/cuda\necho pwned > {tmp_path / 'marker'}")
    monkeypatch.setenv("CC", "gcc\x1b]0;x\x07")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0\u2028echo x")
    facts = collect(FakeRunner({}), import_torch=False)
    assert facts["cuda.home_env"] is None and facts["gcc.cc_env"] is None
    assert facts["env.TORCH_CUDA_ARCH_LIST"] is None
    refused = facts["facts.refused"]
    assert isinstance(refused, list)
    assert {"cuda.home_env", "gcc.cc_env", "env.TORCH_CUDA_ARCH_LIST"} <= set(refused)


def test_run_check_cleans_facts_handed_in() -> None:
    result = run_check(facts={**load_report(H200_CAPTURE), "cuda.toolkit_root": "/x\ny",
                              "cuda.home_has_headers": False})
    assert result.facts["cuda.toolkit_root"] is None and "CUDA_HOME" not in result.env


@pytest.mark.parametrize("shell", shells.ALL)
def test_command_templates_quote_each_value_for_where_it_sits(tmp_path: Path, shell: str) -> None:
    """A fix command pasted into any of the four shells runs no value, and prints the value it was given."""
    marker = tmp_path / "marker"
    for payload in payloads(marker):
        facts = {"cuda.home": payload, "gcc.version": payload}
        for template in ("export PATH={cuda.home}/bin:$PATH", "export CUDA_HOME={cuda.home}",
                         "conda install 'gxx={gcc.version}'", 'echo "{cuda.home}" >/dev/null',
                         "echo ok   # {cuda.home}", "printf %s {cuda.home}", "printf %s '<{cuda.home}>'"):
            cmd = render(template, facts, as_command=True)
            assert not has_control(cmd), (template, payload, cmd)
            proc = shells.run(shell, cmd, tmp_path)
            assert not marker.exists(), (shell, template, payload, cmd)
            if template.startswith("printf") and not has_control(payload):
                want = payload if "<" not in template else f"<{payload}>"
                assert proc.stdout == want, (shell, template, payload, cmd, proc.stderr)
    # a plain value prints exactly as the template says
    assert render("export CUDA_HOME=/usr/local/cuda-{torch.cuda}", {"torch.cuda": "13.0"}, as_command=True) == \
        "export CUDA_HOME=/usr/local/cuda-13.0"
    assert fill([("export A=", "a b"), (" # ", "x\ny")]) == "export A='a b' # x y"


def _hostile_report(tmp_path: Path, payload: str) -> Path:
    facts = {**load_report(H200_CAPTURE), "gpu.0.name": f"NVIDIA H200 {payload}", "cuda.toolkit_root": payload,
             "cuda.home": payload, "cuda.home_has_headers": False, "nvcc.path": payload,
             "cuda.home_nvcc_version": "12.8", "nvcc.on_path_version": "13.0"}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"olmo_doctor_report": 1, "facts": facts}))
    return path


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_env_from_a_hostile_report_never_runs_a_value(tmp_path: Path, fmt: str) -> None:
    marker = tmp_path / "marker"
    runner = CliRunner()
    for payload in payloads(marker)[::3]:  # a spread of payloads through the real command, every format
        report = _hostile_report(tmp_path, payload)
        res = runner.invoke(app, ["env", "--format", fmt, "--from-report", str(report)])
        assert res.exit_code == 0, res.output
        (tmp_path / "e.env").write_text(res.stdout)
        if fmt == "fish":
            assert all(not has_control(line) for line in res.stdout.splitlines())
            out = [_fish_source(tmp_path, res.stdout)]
        else:
            out = [shells.run(shell, 'set -a; . ./e.env; printf %s "$CUDA_HOME"', tmp_path).stdout
                   for shell in shells.POSIX]
        assert not marker.exists(), (payload, res.stdout)
        assert out == [("" if has_control(payload) else payload)] * len(out), (payload, res.stdout)


def test_check_fix_commands_from_a_hostile_report_never_run_a_value(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    runner = CliRunner()
    for payload in payloads(marker)[1::3]:
        report = _hostile_report(tmp_path, payload)
        res = runner.invoke(app, ["check", "--json", "--from-report", str(report)])
        data = json.loads(res.stdout)
        commands = [c for f in data["findings"] for fx in f["fixes"] for c in fx["commands"]]
        assert commands
        for cmd in commands:  # PATH is empty: only builtins (export, echo >) could run
            for shell in shells.ALL:
                shells.run(shell, cmd, tmp_path)
                assert not marker.exists(), (shell, payload, cmd)
        text = runner.invoke(app, ["check", "--from-report", str(report)]).stdout
        assert "\x1b" not in text and "\u2028" not in text and "\r" not in text


CHECK_TARGETS = ["os.system", "subprocess.run", "evil_od_check.run", "olmo_doctor.cli.main", "memory.math",
                 "../evil_od_check.run", "/tmp/evil_od_check.run", "memory.planned_jobs.__globals__",
                 "memory.compile_jobs_exceed_memory.x", "", "evil_od_check", "checks.evil_od_check",
                 "memory.planned_jobs", "build.no_gpu", "memory.max_jobs"]


def test_rule_check_targets_resolve_only_in_the_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule naming a module on sys.path or PATH must not import or run it: the loader refuses it by name."""
    from dataclasses import replace

    from olmo_doctor.resources import data_dir
    from olmo_doctor.rules.engine import fires
    from olmo_doctor.rules.model import RuleError, load_file

    marker = tmp_path / "marker"
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "evil_od_check.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef run(f): return {{}}\n")
    (tmp_path / "bin").mkdir()
    prog = tmp_path / "bin" / "evil_od_check"
    prog.write_text(f"#!/bin/sh\necho x > {marker}\n")
    prog.chmod(0o755)
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    source = (data_dir("known_issues") / "OD210-compile-jobs-exceed-memory.toml").read_text()
    good = load_file(data_dir("known_issues") / "OD210-compile-jobs-exceed-memory.toml")
    for target in CHECK_TARGETS:
        path = tmp_path / "OD210-attack.toml"
        path.write_text(source.replace('check = "memory.compile_jobs_exceed_memory"', f"check = {target!r}"))
        with pytest.raises(RuleError):
            load_file(path)
        with pytest.raises(RuleError):  # a Rule built by hand is refused by the engine too
            fires(replace(good, check=target), {"cpu.count": 64, "mem.available_gb": 8.0})
        assert not marker.exists(), target
    fired, ctx, _ = fires(good, {"cpu.count": 64, "mem.available_gb": 8.0})  # the registered one still works
    assert fired and ctx["planned_jobs"] == 66


def test_rewriting_env_sh_never_turns_text_into_a_command(tmp_path: Path) -> None:
    """A line the shell reads as one comment (U+2028, CR, NEL inside it) stays one line after fix rewrites it."""
    marker = tmp_path / "marker"
    for sep in ("\u2028", "\r", "\x85", "\u2029", "\x0b", "\x0c", "\x1c"):
        user = f"# note{sep}echo pwned > {marker}\n"
        block = f"{envfile.BEGIN}\n# why{sep}echo pwned > {marker}\nexport A=1\n{envfile.END}\n"
        for existing in (user, user + block):
            text = envfile.updated(existing, [envfile.entry(EnvSet("MAX_JOBS", "4"), "r")])
            (tmp_path / "env.sh").write_text(text)
            for shell in shells.POSIX:
                shells.run(shell, ". ./env.sh", tmp_path)
                assert not marker.exists(), (shell, repr(sep), text)
