"""Each fix kind applied and undone in a real temporary venv: byte-identical files, identical `pip freeze`.

Runs the real CLI in-process against synthetic rules (tests/_fix_sandbox.py) whose facts are the sandbox's real
state, so the re-check after --apply sees what the fix really changed.
"""

from __future__ import annotations

import json
import resource
import shutil
from collections.abc import Iterator

import pytest
from _fix_sandbox import Sandbox, cli, make_wheel, pip_dir_fixture, sandbox_fixture  # noqa: F401 (fixtures)

from olmo_doctor.fix.envfile import ENV_FILE, overlay


def apply_json(*extra: str) -> dict:
    code, out = cli("fix", "--apply", "--json", *extra)
    data = json.loads(out)
    data["exit_code"] = code
    return data


@pytest.mark.slow
def test_env_set_unset_ulimit_applied_and_undone(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch,
                                                 low_nofile: None) -> None:
    monkeypatch.setenv("OLMO_FIX_BAD", "1")
    env_path = sandbox.project / ENV_FILE
    env_path.parent.mkdir()
    env_path.write_text("# mine\nexport WANDB_MODE=offline\n")  # the user's own file, kept byte for byte
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD901,OD904,OD905")
    assert data["status"] == "applied"
    assert sorted(data["recheck"]["gone"]) == ["OD901", "OD904", "OD905"]
    assert data["recheck"]["remaining"] == ["OD902"] and data["exit_code"] == 1  # an error finding is left
    text = env_path.read_text()
    assert text.startswith("# mine\nexport WANDB_MODE=offline\n")
    ov = overlay(text)
    assert ov.set == {"OLMO_FIX_HOME": "/opt/cuda test"} and ov.unset == {"OLMO_FIX_BAD"}
    assert ov.limits == {"nofile": "hard"}
    code, out = cli("fix", "--undo")
    assert code == 0 and "Undid fix" in out
    assert sandbox.tree() == before and sandbox.freeze() == freeze


@pytest.mark.slow
def test_pip_install_and_undo(sandbox: Sandbox) -> None:
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD902")
    assert data["status"] == "applied" and data["recheck"]["gone"] == ["OD902"]
    assert "tinypkg==1.0" in sandbox.freeze()
    assert data["steps"][0]["changes"] == ["+tinypkg 1.0"]
    assert cli("fix", "--undo")[0] == 0
    assert sandbox.tree() == before and sandbox.freeze() == freeze


@pytest.mark.slow
def test_downgrade_undone_offline_from_the_journal(sandbox: Sandbox) -> None:
    sandbox.install("tool", "2.0", script="tool-cli")
    make_wheel(sandbox.wheels, "tool", "1.0", script="tool-cli")
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD906")
    assert data["status"] == "applied" and "tool==1.0" in sandbox.freeze()
    assert data["steps"][0]["changes"] == ["tool 2.0 -> 1.0"]
    shutil.rmtree(sandbox.wheels)  # offline now: tool 2.0 can only come back from the journal's repacked wheel
    sandbox.wheels.mkdir()
    code, out = cli("fix", "--undo")
    assert code == 0, out
    assert sandbox.freeze() == freeze
    assert sandbox.tree() == before  # module, data file, console script, dist-info (INSTALLER, RECORD...)


@pytest.mark.slow
def test_pip_uninstall_undone_with_editable_style_metadata(sandbox: Sandbox) -> None:
    sandbox.install("badpkg", "0.6.0", script="badpkg")
    shutil.rmtree(sandbox.wheels)
    sandbox.wheels.mkdir()
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD903")
    assert data["status"] == "applied" and data["recheck"]["gone"] == ["OD903"]
    assert not any(line.startswith("badpkg") for line in sandbox.freeze())
    assert cli("fix", "--undo")[0] == 0
    assert sandbox.freeze() == freeze and sandbox.tree() == before


@pytest.mark.slow
def test_reinstall_torch_is_unsafe_and_undone(sandbox: Sandbox) -> None:
    sandbox.install("torch", "2.11.0+cu130")
    make_wheel(sandbox.wheels, "torch", "2.11.0+cu128")
    dry = json.loads(cli("fix", "--json", "--only", "OD907")[1])
    assert [i["status"] for i in dry["items"]] == ["needs_unsafe"]
    assert apply_json("--only", "OD907")["status"] == "nothing_to_do"
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD907", "--unsafe-fixes")
    assert data["status"] == "applied" and "torch==2.11.0+cu128" in sandbox.freeze()
    assert cli("fix", "--undo")[0] == 0
    assert sandbox.freeze() == freeze and sandbox.tree() == before


# Stands in for `python -m olmo_doctor build-kernels` inside the sandbox venv: "rebuilds" flash-attn by installing
# another build of it, the way the real command installs the wheel it compiled.
FAKE_BUILD = """import subprocess, sys
assert sys.argv[1:] == ["build-kernels", "--package", "flash-attn"], sys.argv
subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall",
                "flash-attn==2.8.3+rebuilt"], check=True)
"""


@pytest.mark.slow
def test_rebuild_kernel_applied_and_undone(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("olmo_doctor.fix.plan.build_kernels_available", lambda: True)
    sandbox.install("fake-build", "1.0", extra={"olmo_doctor/__init__.py": "", "olmo_doctor/__main__.py": FAKE_BUILD})
    sandbox.install("flash-attn", "2.8.3")
    make_wheel(sandbox.wheels, "flash-attn", "2.8.3+rebuilt")
    sandbox.state["test.rebuild"] = True
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD909", "--unsafe-fixes")
    assert data["status"] == "applied", data.get("error")
    assert data["steps"][0]["argv"][-4:] == ["olmo_doctor", "build-kernels", "--package", "flash-attn"]
    assert data["steps"][0]["changes"] == ["flash-attn 2.8.3 -> 2.8.3+rebuilt"]
    shutil.rmtree(sandbox.wheels)  # the old build exists only in the journal now
    sandbox.wheels.mkdir()
    assert cli("fix", "--undo")[0] == 0
    assert sandbox.freeze() == freeze and sandbox.tree() == before


def test_rebuild_kernel_waits_for_build_kernels(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("olmo_doctor.fix.plan.build_kernels_available", lambda: False)
    sandbox.state["test.rebuild"] = True
    dry = json.loads(cli("fix", "--json", "--only", "OD909", "--unsafe-fixes")[1])
    [item] = dry["items"]
    assert item["status"] == "blocked" and "build-kernels is not available" in item["reason"]
    assert apply_json("--only", "OD909", "--unsafe-fixes")["status"] == "nothing_to_do"
    assert not (sandbox.project / ".olmo-doctor").exists()


@pytest.mark.slow
def test_dry_run_json_is_exactly_what_apply_does(sandbox: Sandbox, low_nofile: None) -> None:
    sandbox.install("badpkg", "0.6.0")
    sandbox.install("tool", "2.0")
    make_wheel(sandbox.wheels, "tool", "1.0")
    dry = json.loads(cli("fix", "--json")[1])
    planned = [i for i in dry["items"] if i["status"] == "apply"]
    assert [i["op"] for i in planned] == ["write_env_file", "pip_uninstall", "pip_install", "pip_install"]
    data = apply_json()
    assert data["status"] == "applied"
    assert [s["item"] for s in data["steps"]] == [i["id"] for i in planned]
    assert [s.get("argv") for s in data["steps"]] == [i.get("argv") for i in planned]
    assert (sandbox.project / ENV_FILE).read_text() == planned[0]["content"]
    assert sorted(data["recheck"]["gone"]) == ["OD901", "OD902", "OD903", "OD904", "OD906"]
    # idempotence: the second run does nothing at all (no journal entry, no file touched)
    tree, freeze = sandbox.tree(), sandbox.freeze()
    again = apply_json()
    assert again["status"] == "nothing_to_do" and again["journal"] is None
    assert sandbox.tree() == tree and sandbox.freeze() == freeze
    assert len(list((sandbox.project / ".olmo-doctor" / "journal").glob("0*"))) == 1


@pytest.mark.slow
def test_failure_part_way_rolls_everything_back(sandbox: Sandbox) -> None:
    sandbox.state["test.want_missing"] = True  # OD910 asks for missing-pkg, which no index has
    env_path = sandbox.project / ENV_FILE
    env_path.parent.mkdir()
    env_path.write_bytes(b"export KEEP=1\r\n")
    before, freeze = sandbox.tree(), sandbox.freeze()
    data = apply_json("--only", "OD901,OD902,OD910")
    assert data["exit_code"] == 1 and data["status"] == "rolled_back"
    assert [s["ok"] for s in data["steps"]] == [True, True, False]  # env file, tinypkg, then missing-pkg failed
    assert "missing-pkg" in data["error"] and not data["rollback_problems"]
    assert sandbox.tree() == before and sandbox.freeze() == freeze
    code, line = cli("fix", "--undo")
    assert code == 2 and "nothing to undo" in line


@pytest.fixture
def low_nofile() -> Iterator[None]:
    """A soft open-files limit below the hard one, so the ulimit rule fires (restored afterwards)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("hard open-files limit too low to lower the soft one")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_interrupted_run_is_refused_then_undone(sandbox: Sandbox) -> None:
    """Ctrl-C in the last step rolls the run back. A run killed mid-way (simulated: rollback disabled, as after
    kill -9) leaves an in_progress entry: --apply refuses until --undo has put everything back."""
    from olmo_doctor.fix import execute, pyenv

    sandbox.state["test.want_missing"] = True
    before, freeze = sandbox.tree(), sandbox.freeze()
    real_run = pyenv.run

    def dies_on_missing(argv: list[str], echo: object = None) -> tuple[int, str]:
        if "missing-pkg==1.0" in argv and "--dry-run" not in argv:
            raise KeyboardInterrupt
        return real_run(argv, echo)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:  # Ctrl-C: the run rolls itself back, then stops
        mp.setattr(pyenv, "run", dies_on_missing)
        assert cli("fix", "--apply", "--only", "OD901,OD902,OD910")[0] != 0
    assert sandbox.tree() == before and sandbox.freeze() == freeze
    [entry] = (sandbox.project / ".olmo-doctor" / "journal").glob("0*")
    assert json.loads((entry / "manifest.json").read_text())["entry"]["status"] == "rolled_back"
    with pytest.MonkeyPatch.context() as mp:  # killed: nothing gets to roll back
        mp.setattr(pyenv, "run", dies_on_missing)
        mp.setattr(execute, "_restore", lambda *a, **k: None)
        code, _ = cli("fix", "--apply", "--only", "OD901,OD902,OD910")  # click turns Ctrl-C into "Aborted!"
    assert code != 0
    assert (sandbox.project / ENV_FILE).exists() and "tinypkg==1.0" in sandbox.freeze()
    code, line = cli("fix", "--apply")
    assert code == 2 and "did not finish" in line
    assert cli("fix", "--undo")[0] == 0
    assert sandbox.tree() == before and sandbox.freeze() == freeze
