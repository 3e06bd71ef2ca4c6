"""A hostile working folder: what a cloned repository or a download folder can hold so that running a command
inside it runs its code. Every planted thing writes a marker file named after itself into `markers` when it runs,
so a test can assert that nothing did.

    json.py, sysconfig.py            shadow the standard library for any `python -c` / `python -m` started here
    pip/, multiprocessing/           shadow `python -m pip` and multiprocessing's worker bootstrap
    nvidia-smi, nvcc, gcc, ...       executables, found through an empty PATH entry (a trailing ':')
    .olmo-doctor/env.sh              an olmo-doctor-looking block exporting LD_PRELOAD, PATH and PYTHONPATH into
                                     this folder (evil.so, bin/, py/json.py)

The Python payloads delegate to the real module after writing the marker (as a careful attacker's would), so a
command that imports one does not fail and the marker is the only trace.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("nvidia-smi", "nvcc", "gcc", "g++", "cc", "c++", "ldd", "ninja", "git", "uname", "ccache", "ldconfig",
         "python", "python3", "pip3", "torchrun", "lscpu", "ibstat", "free", "df")

_MODULE = '''import os, sys
open(os.path.join({markers!r}, {name!r}), "a").write("ran\\n")
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules[__name__]
import importlib
_real = importlib.import_module(__name__)
sys.modules[__name__] = _real
globals().update(_real.__dict__)
'''

_PACKAGE_MAIN = '''import os
open(os.path.join({markers!r}, {name!r}), "a").write("ran\\n")
raise SystemExit(1)
'''

_PRELOAD_C = r'''
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void ran(void) {
    int fd = open("%s", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { write(fd, "ran\n", 4); close(fd); }
}
'''


@dataclass
class Hostile:
    folder: Path
    markers: Path

    def ran(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a user would run in: PATH with a trailing ':' (the folder), no PYTHONPATH."""
        env = dict(base or os.environ)
        env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":"
        env.pop("PYTHONPATH", None)
        return env


def _executable(path: Path, markers: Path) -> None:
    path.write_text(f"#!/bin/sh\necho ran >> '{markers / path.name}'\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _package(folder: Path, name: str, markers: Path) -> None:
    (folder / name).mkdir()
    init = f"import os\nopen(os.path.join({str(markers)!r}, {name + '-package'!r}), 'a').write('ran\\n')\n"
    (folder / name / "__init__.py").write_text(init)
    (folder / name / "__main__.py").write_text(_PACKAGE_MAIN.format(markers=str(markers), name=name + "-main"))


def build(root: Path) -> Hostile:
    folder, markers = root / "repo", root / "markers"
    folder.mkdir(parents=True)
    markers.mkdir()
    for name in ("json", "sysconfig"):
        (folder / f"{name}.py").write_text(_MODULE.format(markers=str(markers), name=name))
    for name in ("pip", "multiprocessing"):
        _package(folder, name, markers)
    for tool in TOOLS:
        _executable(folder / tool, markers)
    # what env.sh points at: another bin/ (absolute: PATH lookups would take it), a py/ with json.py, a library
    (folder / "bin").mkdir()
    for tool in TOOLS:
        _executable(folder / "bin" / tool, markers)
    (folder / "py").mkdir()
    (folder / "py" / "json.py").write_text(_MODULE.format(markers=str(markers), name="pythonpath-json"))
    src = folder / "evil.c"
    src.write_text(_PRELOAD_C % (markers / "ld-preload"))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(src)], check=True)
    state = folder / ".olmo-doctor"
    state.mkdir()
    (state / "env.sh").write_text(
        "# >>> olmo-doctor >>>\n"
        "# Written by `olmo-doctor fix --apply`; load it with: source .olmo-doctor/env.sh\n"
        f"export LD_PRELOAD={folder / 'evil.so'}\n"
        f"export PATH={folder / 'bin'}:/usr/bin:/bin\n"
        f"export PYTHONPATH={folder / 'py'}\n"
        "# <<< olmo-doctor <<<\n")
    return Hostile(folder, markers)


def naive_python_runs_it(h: Hostile) -> list[str]:
    """The control: a plain `python -c 'import json'` in the folder runs the planted json.py."""
    subprocess.run([sys.executable, "-c", "import json"], cwd=h.folder, env=h.env(), check=True)
    ran = h.ran()
    for p in h.markers.iterdir():
        p.unlink()
    return ran
