"""Running tools and Python without running code from the working folder or the project.

Two lookups run whatever the folder you stand in holds. A shell (and `shutil.which`, and `execvp`) reads an empty
PATH entry (a leading, trailing or doubled ':'), '.' or any relative entry as "the current folder", so `check`
inside a cloned repository would run its ./nvidia-smi. And Python puts the current folder first on `sys.path`
for `python -c` and `python -m`, so a json.py, sysconfig.py, pip/ or multiprocessing/ there runs in every such
subprocess before its first line does. Here:

    which(name)              a tool from PATH's absolute entries only
    ignored_path_entries()   the PATH entries that name the working folder (rule OD263 reports them)
    sanitize_process_path()  drop them from this process's PATH at start-up, so no library we call uses them;
                             an unsafe LD_LIBRARY_PATH entry restarts the process once without it (the linker
                             reads that variable only at exec)
    python_argv(py, ...)     `py -I ...`: no working folder, no PYTHON* variables, no user site-packages; with
                             user_paths=True `py -P ...` (Python >= 3.11), which keeps the user's site-packages
                             and the absolute entries of PYTHONPATH (said by rule OD264) but not the folder
    child_env(user_paths)    the environment those children get: PATH and LD_LIBRARY_PATH without the folder's entries,
                             PYTHONSAFEPATH=1 (for grandchildren started without our flags), PYTHONPATH cleaned

pip is always `<venv python> -I -m pip`. Build commands (pip wheel of a fetched source tree) run that tree's
setup.py by design; they still get the clean PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

_STARTUP_IGNORED: list[str] = []  # what sanitize_process_path removed, so the probe can still report it


def _unsafe(entry: str) -> bool:
    return not os.path.isabs(entry)


def ignored_path_entries(path: str | None = None) -> list[str]:
    """PATH entries a lookup would resolve against the working folder: '' (an empty entry), '.', relative ones."""
    if path is None:
        found = list(_STARTUP_IGNORED)
        path = os.environ.get("PATH", "")
    else:
        found = []
    found += [e for e in path.split(os.pathsep) if _unsafe(e)]
    return list(dict.fromkeys(found))


def safe_path(path: str | None = None) -> str:
    """PATH with only its absolute entries."""
    path = os.environ.get("PATH", os.defpath) if path is None else path
    return os.pathsep.join(e for e in path.split(os.pathsep) if not _unsafe(e))


def sanitize_process_path() -> None:
    """Drop the working-folder entries from this process's own PATH (once, at command start): torch, triton and
    every tool we start then look tools up in absolute folders only. What was dropped is kept for the report."""
    path = os.environ.get("PATH")
    if path is None:
        return
    dropped = [e for e in path.split(os.pathsep) if _unsafe(e)]
    if dropped:
        _STARTUP_IGNORED.extend(e for e in dropped if e not in _STARTUP_IGNORED)
        os.environ["PATH"] = safe_path(path)
    restart_without_unsafe_library_path()


_RESTARTED = "OLMO_DOCTOR_LIBRARY_PATH_CLEANED"  # set for the restarted process: restart once, never loop
_ENTRY_MODULES = ("olmo", "olmo_doctor")  # `python -m olmo` / `-m olmo_doctor`; console scripts by argv[0]


def _is_our_entry_point() -> bool:
    """Whether this process is one of our commands (a console script, `python -m`, or a `python -c` child), not a
    host such as pytest that called main() in-process: only our own process may be replaced by a restart."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name.split(".")[0] in _ENTRY_MODULES
    return os.path.basename(sys.argv[0]) in ("olmo", "olmo-doctor", "-c")


def restart_without_unsafe_library_path() -> None:
    """An empty or relative LD_LIBRARY_PATH entry (`export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64`
    with the variable unset leaves a leading ':') makes the dynamic linker look in the working folder for every
    library loaded later: a libstdc++.so.6 or libgomp.so.1 there would run in torch's import. The linker reads
    the variable once, at exec, so dropping the entries from os.environ only protects children: this process is
    restarted once with the cleaned variable, before any extension library is loaded."""
    value = os.environ.get("LD_LIBRARY_PATH")
    if value is None or not any(_unsafe(e) for e in value.split(os.pathsep)):
        return
    clean = safe_path(value)
    if clean:
        os.environ["LD_LIBRARY_PATH"] = clean
    else:
        del os.environ["LD_LIBRARY_PATH"]
    if os.environ.get(_RESTARTED) or not _is_our_entry_point() or not sys.orig_argv:
        return
    os.environ[_RESTARTED] = "1"
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def which(name: str) -> str | None:
    """The tool `name` found in PATH's absolute entries (an absolute `name` is checked as is)."""
    if os.path.isabs(name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    if os.sep in name:
        return None  # a relative path names the working folder's tool
    return shutil.which(name, path=safe_path())


def user_pythonpath() -> list[str]:
    """The absolute entries of the user's PYTHONPATH (a relative or empty one would be the working folder)."""
    return [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e and not _unsafe(e)]


def ignored_pythonpath_entries() -> list[str]:
    raw = os.environ.get("PYTHONPATH")
    if not raw:
        return []
    return list(dict.fromkeys(e for e in raw.split(os.pathsep) if _unsafe(e)))


def _has_safe_path_flag(python: str) -> bool:
    """Whether `python` knows -P (3.11+); only the running interpreter's version is known without asking it."""
    try:
        same = os.path.samefile(python, sys.executable)
    except OSError:
        same = False
    return same and sys.version_info >= (3, 11)


def python_argv(python: str, *args: str, user_paths: bool = False) -> list[str]:
    """The argv that runs `python args` with no module from the working folder (see the module docstring)."""
    flag = "-P" if user_paths and _has_safe_path_flag(python) else "-I"
    return [python, flag, *args]


def child_env(user_paths: bool = False, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process: PATH without working-folder entries, PYTHONSAFEPATH=1, and
    PYTHONPATH reduced to its absolute entries (user_paths) or removed, PYTHONHOME/PYTHONSTARTUP removed
    unless user_paths (they would point the child at other packages or run a file at start)."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = safe_path(env.get("PATH", os.defpath))
    if "LD_LIBRARY_PATH" in env:  # the linker reads an empty or relative entry as the working folder too
        env["LD_LIBRARY_PATH"] = safe_path(env["LD_LIBRARY_PATH"])
        if not env["LD_LIBRARY_PATH"]:
            del env["LD_LIBRARY_PATH"]
    env["PYTHONSAFEPATH"] = "1"
    drop = ("PYTHONSTARTUP",) if user_paths else ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE")
    for name in drop:
        env.pop(name, None)
    if user_paths:
        _keep_absolute_paths(env)
    return env


def _keep_absolute_paths(env: dict[str, str]) -> None:
    """PYTHONPATH reduced to its entries that cannot name the working folder (removed when none is left)."""
    kept = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and not _unsafe(e)]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
