"""Sandbox for the fix tests: a real temporary venv, tiny wheels built here, an isolated HOME and pip config,
and a synthetic check whose rules (real TOML, loaded by the real loader) fire on the sandbox's real state.

pip runs for real (install, uninstall, freeze) but offline: PIP_NO_INDEX with find-links to a folder of wheels
we zip ourselves, so each pip call takes well under a second.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import resource
import subprocess
import sys
import textwrap
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from olmo_doctor.api import CheckResult
from olmo_doctor.cli import app
from olmo_doctor.envplan import EnvVar
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, FactValue
from olmo_doctor.fix import pyenv
from olmo_doctor.rules.engine import run_rules
from olmo_doctor.rules.model import load_rules


def make_wheel(dest: Path, name: str, version: str, script: str | None = None,
               extra: dict[str, str] | None = None) -> Path:
    """A minimal pure-Python wheel: a module with its version, optionally a console script and more files."""
    mod = name.replace("-", "_")
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    files = {
        **(extra or {}),
        f"{mod}/__init__.py": f'__version__ = "{version}"\n\n\ndef main() -> None:\n    print(__version__)\n',
        f"{mod}/data.txt": f"{name} {version} payload\n" * 20,
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: olmo-doctor-tests\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
    }
    if script:
        files[f"{dist}.dist-info/entry_points.txt"] = f"[console_scripts]\n{script} = {mod}:main\n"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            data = text.encode()
            zf.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([arc, f"sha256={digest}", len(data)])
        writer.writerow([f"{dist}.dist-info/RECORD", "", ""])
        zf.writestr(f"{dist}.dist-info/RECORD", record.getvalue())
    return path


# Synthetic rules: real TOML through the real loader and engine; facts come from the sandbox's real state.
RULES = {
    "OD901-test-env-set": ('cuda_home_missing', 'default(env.OLMO_FIX_HOME, "") != test.toolkit', "safe",
                           '{ op = "env_set", name = "OLMO_FIX_HOME", value = "{test.toolkit}" }'),
    "OD902-test-pip-install": ("ninja_missing", "not test.has_tinypkg", "safe",
                               '{ op = "pip_install", requirement = "tinypkg==1.0" }'),
    "OD903-test-pip-uninstall": ("shadowed_module", "test.has_badpkg", "safe",
                                 '{ op = "pip_uninstall", package = "badpkg" }'),
    "OD904-test-ulimit": ("ulimit_nofile", "ulimit.nofile.soft < ulimit.nofile.hard", "safe",
                          '{ op = "ulimit", resource = "nofile", value = "hard" }'),
    "OD905-test-env-unset": ("nccl_config", "known(env.OLMO_FIX_BAD)", "safe",
                             '{ op = "env_unset", name = "OLMO_FIX_BAD" }'),
    "OD906-test-downgrade": ("setuptools_pip", "known(test.tool) and ver(test.tool) >= ver('2')", "safe",
                             '{ op = "pip_install", requirement = "tool<2" }'),
    "OD907-test-torch": ("driver_too_old", "known(test.torch) and not matches(test.torch, 'cu128')", "unsafe",
                         '{ op = "reinstall_torch", index = "cu128" }'),
    "OD908-test-manual": ("no_gpu", "test.manual", "manual", None),
    "OD909-test-rebuild": ("abi_undefined_symbol", "test.rebuild", "unsafe",
                           '{ op = "rebuild_kernel", package = "flash-attn" }'),
    "OD910-test-missing": ("ninja_missing", "test.want_missing", "safe",
                           '{ op = "pip_install", requirement = "missing-pkg==1.0" }'),
}


def write_rules(folder: Path, codes: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stem, (cause, when, grade, action) in RULES.items():
        if stem[:5] not in codes:
            continue
        code, name = stem[:5], stem[6:]
        fix = f'[[fix]]\ntitle = "Fix {name}"\napplicability = "{grade}"\ncommands = ["echo {name}"]\n'
        if action:
            fix += f"action = {action}\n"
        (folder / f"{stem}.toml").write_text(textwrap.dedent(f"""\
            code = "{code}"
            name = "{name}"
            cause = "{cause}"
            severity = "error"
            title = "Synthetic {name}"
            message = "A synthetic rule for the fix tests."
            when = "{when.replace('"', chr(92) + '"')}"
            sources = ["https://example.org/fix-tests"]
            """) + fix)
    return folder


@dataclass
class Sandbox:
    root: Path
    venv: Path
    project: Path
    wheels: Path
    rules: Path
    state: dict[str, FactValue] = field(default_factory=dict)  # extra facts a test sets (test.manual, ...)
    recommended: dict[str, EnvVar] = field(default_factory=dict)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def pip(self, *args: str) -> str:
        proc = subprocess.run([self.python, "-m", "pip", *args], capture_output=True, text=True, check=True)
        return proc.stdout

    def freeze(self) -> list[str]:
        return pyenv.freeze(self.python)

    def install(self, name: str, version: str, script: str | None = None,
                extra: dict[str, str] | None = None) -> None:
        make_wheel(self.wheels, name, version, script, extra)
        self.pip("install", "--no-deps", f"{name}=={version}")

    def facts(self) -> Facts:
        dists = pyenv.query(self.python).dists
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return {
            "test.toolkit": "/opt/cuda test", "env.OLMO_FIX_HOME": os.environ.get("OLMO_FIX_HOME"),
            "env.OLMO_FIX_BAD": os.environ.get("OLMO_FIX_BAD"),
            "test.has_tinypkg": "tinypkg" in dists, "test.has_badpkg": "badpkg" in dists,
            "test.tool": dists["tool"].version if "tool" in dists else None,
            "test.torch": dists["torch"].version if "torch" in dists else None,
            "ulimit.nofile.soft": soft, "ulimit.nofile.hard": hard,
            "test.manual": False, "test.rebuild": False, "test.want_missing": False, **self.state,
        }

    def check(self, **_: object) -> CheckResult:
        facts = self.facts()
        findings = run_rules(facts, rules=load_rules(self.rules))
        return CheckResult(facts, findings, dict(self.recommended))

    def tree(self) -> dict[str, bytes]:
        """Every file of the project and the venv's site-packages with its bytes (bytecode left out)."""
        out = {}
        for base in (self.project, self.venv / "lib"):
            for p in sorted(base.rglob("*")):
                if p.is_file() and "__pycache__" not in p.parts and "journal" not in p.parts:
                    out[str(p)] = p.read_bytes()
        for p in sorted((self.venv / "bin").iterdir()):
            if p.is_file() and not p.is_symlink():
                out[str(p)] = p.read_bytes()
        return out


_runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    """Run `olmo-doctor ARGS` in-process as main() would: UsageError -> exit 2 with its one line."""
    res = _runner.invoke(app, list(args))
    if isinstance(res.exception, UsageError):
        return 2, f"olmo-doctor: {res.exception}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout


_PIP_DIR: list[Path] = []


@pytest.fixture(name="pip_dir")
def pip_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding pip (and setuptools), made once per session by `python -m venv` with ensurepip.

    Each test's venv is a fresh `python -m venv --without-pip` that imports pip from here through a .pth file:
    a real venv (pip installs into, uninstalls from and freezes it) without copying 25 MB of pip per test."""
    if not _PIP_DIR:
        path = tmp_path_factory.mktemp("fix-pip") / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        site = next(path.glob("lib/python*/site-packages"))
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(site / "pip")], check=True,
                       stdout=subprocess.DEVNULL)  # PYTHONDONTWRITEBYTECODE would make every pip call recompile
        _PIP_DIR.append(site)
    return _PIP_DIR[0]


@pytest.fixture(name="sandbox")
def sandbox_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pip_dir: Path) -> Sandbox:
    for key in list(os.environ):
        if key.startswith("PIP_") or key in ("OLMO_FIX_HOME", "OLMO_FIX_BAD", "PYTHONPATH"):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no site pip.conf, constraints or extra indexes
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (next(venv.glob("lib/python*/site-packages")) / "_shared_pip.pth").write_text(f"{pip_dir}\n")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))  # as if activated, and olmo-doctor running from it:
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    sb = Sandbox(tmp_path, venv, project, wheels, tmp_path / "rules")
    write_rules(sb.rules, [stem[:5] for stem in RULES])
    make_wheel(wheels, "tinypkg", "1.0")
    monkeypatch.setattr("olmo_doctor.api.run_check", sb.check)
    monkeypatch.setattr("olmo_doctor.commands.fix._known_codes", lambda: {r.code for r in load_rules(sb.rules)})
    return sb
