"""Redaction in `olmo-doctor report` (issue #12): the user's name and home never leak, for any name length and
alphabet, followed by `_` or punctuation; unrelated words are left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from olmo_doctor.api import CheckResult
from olmo_doctor.cli import app
from olmo_doctor.envplan import EnvVar
from olmo_doctor.facts import Facts
from olmo_doctor.redact import redact

NAMES = ["a", "al", "bob", "josé", "łukasz", "李雷", "o'neil", "dr.who", "a-b", "user+1", "Ω"]


def leaks(text: str, user: str, home: str) -> list[str]:
    """Where the name still stands as a token (not inside a longer word) or the home path survives."""
    import re

    found = [m.group(0) for m in re.finditer(rf"(?<![^\W_]){re.escape(user)}(?![^\W_])", text)]
    return found + ([home] if home in text else [])


@pytest.mark.parametrize("user", NAMES)
def test_name_and_home_never_leak(user: str) -> None:
    home = f"/home/{user}"
    facts = {
        "python.executable": f"{home}/venv/bin/python",
        "cuda.home": f"/scratch/{user}/cuda-13.0",
        "os.conda_env": f"/opt/conda/envs/{user}_env",
        "torch.path": f"/data/{user}.old/torch",
        "gcc.path": f"/nfs/{user}/bin/g++",
        "env.LD_LIBRARY_PATH": f"/usr/lib:{home}/lib:/srv/{user}-tools/lib",
        "nccl.error": f"{user}@node1: connection refused",
        "gcc.alternatives": [f"12:/home/{user}/gcc-12/bin/g++"],
    }
    out = redact(facts, home, user)
    text = json.dumps(out, ensure_ascii=False)
    assert not leaks(text, user, home), text
    assert json.dumps(out)  # still serialisable; and the escaped form carries no name either
    assert not leaks(json.loads(json.dumps(out)).__repr__(), user, home)
    assert out["python.executable"] == "~/venv/bin/python"
    assert out["os.conda_env"] == "/opt/conda/envs/<user>_env"


def test_unrelated_words_are_not_shredded() -> None:
    facts = {"a": "a full compile of alpha on an H200", "b": "NVIDIA H200", "c": "/usr/local/cuda-13.0",
             "d": "toolkit_root is /usr/local/cuda", "e": "/home/alice/x"}
    for user, home in (("a", "/home/a"), ("al", "/home/al"), ("root", "/root"), ("cuda", "/home/cuda")):
        out = redact(facts, home, user)
        if len(user) <= 2:  # short names are common words: only path-like words are redacted
            assert out["a"] == facts["a"]
        assert out["b"] == "NVIDIA H200"
        assert out["d"].startswith("toolkit_root")  # a fact name is not a user name
        assert out["e"] == "/home/alice/x"  # /home/al is not a prefix of /home/alice
    assert redact({"x": "/usr/local/cuda-13.0"}, "/home/cuda", "cuda")["x"] == "/usr/local/<user>-13.0"


def test_report_command_redacts_before_serialising(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    user = "jöe"
    home = tmp_path / user
    home.mkdir()
    facts: Facts = {"python.executable": f"{home}/venv/bin/python", "cuda.home": f"/scratch/{user}/cuda",
             "os.conda_env": f"/opt/conda/envs/{user}_x", "gpu.count": 0}
    result = CheckResult(facts, [], {"CUDA_HOME": EnvVar(f"/scratch/{user}/cuda", f"for {user}")})
    monkeypatch.setattr("olmo_doctor.api.run_check", lambda **kw: result)
    monkeypatch.setattr("getpass.getuser", lambda: user)
    monkeypatch.setenv("HOME", str(home))
    res = CliRunner().invoke(app, ["report"])
    assert res.exit_code == 0, res.output
    decoded = json.dumps(json.loads(res.stdout), ensure_ascii=False)
    assert user not in decoded and str(home) not in decoded and "j\\u00f6e" not in res.stdout
    assert "~/venv/bin/python" in decoded and "/scratch/<user>/cuda" in decoded


@pytest.mark.parametrize("user", ["a", "al", "Ω", "李"])
def test_short_names_as_whole_values_and_in_json_text(user: str) -> None:
    home = f"/home/{user}"
    assert redact({"who": user, "env": f"USER={user}", "owner": f"{user}:{user}"}, home, user) == {
        "who": "<user>", "env": "USER=<user>", "owner": "<user>:<user>"}
    text = json.dumps({"who": user, "exe": f"{home}/bin/python", "cc": f"/opt/{user}_gcc/bin/gcc"},
                      ensure_ascii=False)
    out = redact(text, home, user)
    assert not leaks(out, user, home), out
    assert json.loads(out) == {"who": "<user>", "exe": "~/bin/python", "cc": "/opt/<user>_gcc/bin/gcc"}


@pytest.mark.parametrize("user,value", [
    ("alice", "/scratch/ALICE/cuda"), ("alice", "/scratch/Alice/cuda"), ("Bob", "/home2/bob/venv"),
    ("josé", "/data/jose\u0301/x"),  # the name typed as e + combining acute (NFD), as macOS file names are
    ("jose\u0301", "/data/josé/x"), ("łukasz", "/srv/ŁUKASZ_tools"), ("al", "/x/AL/lib"),
])
def test_names_match_in_any_case_and_unicode_form(user: str, value: str) -> None:
    import unicodedata

    out = redact({"v": value}, f"/home/{user}", user)["v"]
    assert "<user>" in out, out
    folded = unicodedata.normalize("NFC", out).casefold()
    assert unicodedata.normalize("NFC", user).casefold() not in folded.replace("<user>", ""), out


def test_every_name_the_user_goes_by_and_the_host_are_redacted(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """$USER says one name, the passwd entry another (containers, `su`), sudo a third; the host name is the
    node's, which a shared report should not carry either."""
    import pwd
    import socket

    home = tmp_path / "h"
    home.mkdir()
    facts: Facts = {"python.executable": "/home/login-name/venv/bin/python", "cuda.home": "/scratch/pw-name/cuda",
                    "os.conda_env": "/home/sudoer/envs/x", "gcc.path": "/nfs/gpu-node-17/bin/gcc", "gpu.count": 0,
                    "torch.path": "/mnt/gpu-node-17.cluster.example.org/torch", "os.name": "Ubuntu 22.04"}
    monkeypatch.setattr("olmo_doctor.api.run_check", lambda **kw: CheckResult(facts, [], {}))
    monkeypatch.setattr("getpass.getuser", lambda: "login-name")
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: type("P", (), {"pw_name": "pw-name"})())
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-node-17.cluster.example.org")
    monkeypatch.setenv("SUDO_USER", "sudoer")
    monkeypatch.setenv("HOME", str(home))
    res = CliRunner().invoke(app, ["report"])
    assert res.exit_code == 0, res.output
    for secret in ("login-name", "pw-name", "sudoer", "gpu-node-17"):
        assert secret not in res.stdout, (secret, res.stdout)
    out = json.loads(res.stdout)["facts"]
    assert out["torch.path"] == "/mnt/<host>/torch" and out["gcc.path"] == "/nfs/<host>/bin/gcc"
    assert out["os.name"] == "Ubuntu 22.04"


def test_a_generic_host_name_does_not_shred_the_report() -> None:
    out = redact({"os": "Ubuntu 22.04", "p": "/home/x/ubuntu/y", "g": "localhost:29500"}, "/home/x", "x",
                 ["ubuntu", "localhost"])
    assert out == {"os": "Ubuntu 22.04", "p": "~/ubuntu/y", "g": "localhost:29500"}
