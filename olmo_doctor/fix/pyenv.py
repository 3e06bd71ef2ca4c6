"""The Python environment that fixes change: which interpreter, whether it is isolated, what it has, and pip.

The target is the environment of the interpreter running olmo-doctor (the one `check` probed); when another venv
is activated, pip fixes are refused rather than guessed. Every pip call is an argv list `[python, "-I", "-m", "pip",
...]` run without a shell, so pip installs into exactly that interpreter's environment. What is installed is read
by a tiny script run by the target interpreter (importlib.metadata): faster than pip, and the same code path
whichever interpreter runs olmo-doctor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from olmo_doctor.errors import UsageError
from olmo_doctor.isolation import child_env, python_argv

_QUERY = r"""
import json, os, re, sys, sysconfig
from importlib import metadata
from importlib.util import find_spec
out = {"prefix": sys.prefix, "base_prefix": sys.base_prefix, "has_pip": find_spec("pip") is not None,
       "purelib": sysconfig.get_path("purelib"), "platlib": sysconfig.get_path("platlib"),
       "scripts": sysconfig.get_path("scripts"), "dists": {}}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if not name:
        continue
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in out["dists"]:
        continue  # the first on sys.path is the one Python imports and pip sees
    path = getattr(dist, "_path", None)
    out["dists"][key] = {"name": name, "version": dist.version, "dist_info": str(path) if path else None,
                         "site": str(dist.locate_file("")), "direct_url": dist.read_text("direct_url.json")}
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Dist:
    """One installed distribution of the target environment."""

    name: str  # as its metadata spells it
    version: str
    dist_info: str | None  # the .dist-info folder (None for eggs and other layouts pip cannot repack)
    site: str  # the folder its RECORD paths are relative to
    direct_url: str | None  # direct_url.json text: editable or URL installs; changes what `pip freeze` prints


@dataclass(frozen=True)
class PyEnv:
    python: str
    prefix: str
    base_prefix: str
    purelib: str
    platlib: str
    scripts: str
    dists: dict[str, Dist]  # canonical name -> Dist
    has_pip: bool = True
    active_venv: str | None = None  # $VIRTUAL_ENV when the query ran

    @property
    def kind(self) -> str:
        """venv, conda (a named conda env, not the base install), or system."""
        if self.prefix != self.base_prefix:
            return "venv"
        prefix = Path(self.prefix)
        if (prefix / "conda-meta").is_dir() and not (prefix / "condabin").is_dir():
            return "conda"
        return "system"

    @property
    def isolated(self) -> bool:
        return self.kind != "system"

    @property
    def foreign_venv(self) -> bool:
        """Is another venv activated than the one olmo-doctor runs in? Its facts would describe the wrong one."""
        return self.active_venv is not None and os.path.realpath(self.active_venv) != os.path.realpath(self.prefix)

    def version(self, name: str) -> str | None:
        dist = self.dists.get(name)
        return dist.version if dist else None


def target_python() -> str:
    """The interpreter fixes apply to: the one running olmo-doctor, whose environment the check probed."""
    return sys.executable


def query(python: str) -> PyEnv:
    """Ask the interpreter where it lives and what it has installed (one short subprocess)."""
    try:
        proc = subprocess.run(python_argv(python, "-c", _QUERY), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, env=child_env())
    except (OSError, subprocess.SubprocessError) as e:
        raise UsageError(f"cannot run the Python at {python}: {e}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"the Python at {python} failed to list its packages: {last}")
    data = json.loads(proc.stdout)
    dists = {k: Dist(**v) for k, v in data.pop("dists").items()}
    return PyEnv(python=python, dists=dists, active_venv=os.environ.get("VIRTUAL_ENV") or None, **data)


def pip_argv(python: str, command: str, *args: str) -> list[str]:
    """`python -I -m pip COMMAND` with no prompts and no version nag; the plan shows exactly this argv. -I: the
    environment's own pip, never a pip/ in the working folder, and no PYTHONPATH or user site-packages that would
    make it see (and change) other packages than the environment's."""
    return [python, "-I", "-m", "pip", command, "--no-input", "--disable-pip-version-check", *args]


def freeze(python: str) -> list[str]:
    """`pip freeze --all` lines (with pip, setuptools and wheel, which fixes may change)."""
    code, out = run(pip_argv(python, "freeze", "--all"))
    if code != 0:
        raise UsageError(f"pip freeze failed in {python}: {out.strip().splitlines()[-1:] or 'no output'}")
    return [line for line in out.splitlines() if line.strip()]


def run(argv: Sequence[str], echo: Callable[[str], None] | None = None) -> tuple[int, str]:
    """Run argv (never a shell), stream its lines to `echo`, return (exit code, combined output)."""
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", stdin=subprocess.DEVNULL, env=child_env())
    except OSError as e:
        return 127, f"cannot run {argv[0]}: {e.strerror or e}\n"
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if echo is not None:
                echo(line.rstrip("\n"))
    except BaseException:
        proc.kill()  # Ctrl-C: stop the tool before the caller rolls back what it did
        proc.wait()
        raise
    return proc.wait(), "".join(lines)
