"""The env file: a marked block inside the user's file, sticky entries, and what a real shell makes of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from olmo_doctor.fix import envfile
from olmo_doctor.rules.actions import EnvSet, EnvUnset, Ulimit
from tests import shells

ENTRIES = [
    envfile.entry(EnvSet("CUDA_HOME", "/opt/cuda 13"), "OD210 Point CUDA_HOME at the toolkit"),
    envfile.entry(EnvSet("TRICKY", "it's $HOME `x` \"q\""), "quoting"),
    envfile.entry(EnvUnset("NCCL_P2P_DISABLE"), "OD220 a lingering workaround"),
    envfile.entry(Ulimit("nofile", "hard"), "OD230 raise open files"),
]


def test_new_file_and_idempotent_rewrite() -> None:
    text = envfile.updated(None, ENTRIES)
    assert text.startswith(envfile.BEGIN) and text.endswith(envfile.END + "\n")
    assert envfile.updated(text, ENTRIES) == text  # the same entries again: byte-identical
    assert [e.key for e in envfile.parse(text).entries] == ["CUDA_HOME", "TRICKY", "NCCL_P2P_DISABLE",
                                                             "ulimit:nofile"]


def test_user_lines_survive_and_entries_are_sticky() -> None:
    user = "# my own settings\nexport WANDB_PROJECT=olmo\n"
    first = envfile.updated(user, ENTRIES)
    assert first.startswith(user)
    # a later run only knows a new MAX_JOBS: everything else stays, the user's lines too
    second = envfile.updated(first + "alias t='olmo train'\n", [envfile.Entry("MAX_JOBS", "export MAX_JOBS=8",
                                                                                "MAX_JOBS: 8 CPUs")])
    assert second.startswith(user) and second.endswith("alias t='olmo train'\n")
    keys = [e.key for e in envfile.parse(second).entries]
    assert keys == ["CUDA_HOME", "TRICKY", "NCCL_P2P_DISABLE", "ulimit:nofile", "MAX_JOBS"]


def test_same_statement_keeps_its_comment_and_a_new_value_replaces_it() -> None:
    text = envfile.updated(None, [envfile.Entry("MAX_JOBS", "export MAX_JOBS=8", "MAX_JOBS: 61.2 GB free")])
    same = envfile.updated(text, [envfile.Entry("MAX_JOBS", "export MAX_JOBS=8", "MAX_JOBS: 60.9 GB free")])
    assert same == text
    changed = envfile.updated(text, [envfile.Entry("MAX_JOBS", "export MAX_JOBS=6", "MAX_JOBS: 40 GB free")])
    assert "export MAX_JOBS=6" in changed and "MAX_JOBS=8" not in changed and "40 GB" in changed
    # an unset replaces an export of the same name
    unset = envfile.updated(changed, [envfile.entry(EnvUnset("MAX_JOBS"), "drop it")])
    assert "unset MAX_JOBS" in unset and "export MAX_JOBS" not in unset


@pytest.mark.parametrize("shell", shells.POSIX)
def test_overlay_matches_what_the_shell_does(tmp_path: Path, shell: str) -> None:
    path = tmp_path / "env.sh"
    path.write_text(envfile.updated(None, ENTRIES))
    proc = shells.run(shell, f'export NCCL_P2P_DISABLE=1; . "{path}"; printf "%s\\n%s\\n%s\\n" "$CUDA_HOME" "$TRICKY" '
                      '"${NCCL_P2P_DISABLE-unset}"; [ "$(ulimit -Sn)" = "$(ulimit -Hn)" ] && echo raised', tmp_path)
    assert proc.returncode == 0, proc.stderr
    ov = envfile.overlay(path.read_text())
    assert proc.stdout.splitlines() == [ov.set["CUDA_HOME"], ov.set["TRICKY"], "unset", "raised"]
    assert ov.set["TRICKY"] == "it's $HOME `x` \"q\"" and ov.unset == {"NCCL_P2P_DISABLE"}
    assert ov.limits == {"nofile": "hard"}
