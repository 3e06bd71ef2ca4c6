"""The Kernels line's float8 item is built from the environment: a torchao (or flash-attn) dist-info whose version
holds markup, escape sequences, newlines or 10 KB of text is data. It must render inert, keep the JSON valid, and
read as unknown (`torchao ?`), never as "not installed": something is installed, its version is just unfit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmo_doctor.facts import clean, is_unknown
from olmo_doctor.render import area_lines, float8_item
from tests.machines import H200_GPU

HOSTILE = ["0.7.0\n! OD999 fake finding", "0.7.0\x1b[31m\x1b]0;pwn\x07", "0.7.0\u2028x", "0." * 5000 + "7"]


@pytest.mark.parametrize("version", HOSTILE, ids=["newline", "escapes", "line-separator", "10kb"])
def test_a_refused_version_reads_as_unknown_not_absent(version: str) -> None:
    facts = clean({**H200_GPU, "torchao.version": version, "flash_attn.version": version})
    assert facts["torchao.version"] is None and is_unknown(facts, "torchao.version")
    assert float8_item(facts) == "float8: torchao ?"
    kernels = area_lines(facts)["Kernels"]
    assert kernels.startswith("flash-attn ?, ") and kernels.endswith("float8: torchao ?")


def test_a_version_that_is_absent_still_says_not_installed() -> None:
    facts = clean({**H200_GPU, "torchao.version": None})
    assert not is_unknown(facts, "torchao.version")
    assert float8_item(facts).startswith("float8: torchao not installed")


def test_a_long_but_real_version_is_kept() -> None:
    version = "2.6.0.dev20241112+cu124.post1"
    assert clean({"torch.version": version})["torch.version"] == version


@pytest.mark.slow
def test_check_renders_a_hostile_torchao_dist_info_inert(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torchao-0.7.0[bold red]X[blink]\x1b[31m\x1b]0;pwn\x07\nOD999.dist-info").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_CACHE_HOME": str(tmp_path / "cache"), "NO_COLOR": "1"}
    base = [sys.executable, "-m", "olmo_doctor", "check", "--scope", "train"]
    out = subprocess.run([*base, "--json"], capture_output=True, text=True, env=env, timeout=120)
    facts = json.loads(out.stdout)["facts"]  # one valid JSON object
    assert facts["torchao.version"] is None and "torchao.version" in facts["facts.refused"]
    text = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120).stdout
    assert "\x1b" not in text and "\x07" not in text and "[blink]" not in text and "OD999" not in text
    assert "float8: torchao ?" in " ".join(text.split())
