"""The folders training and kernel builds write into, tried the way they will be used.

torch.compile (inductor) caches generated code and compiled libraries in TORCHINDUCTOR_CACHE_DIR (default
`<tempdir>/torchinductor_<user>`), Triton its compiled kernels in TRITON_CACHE_DIR (default `~/.triton/cache`),
and nvcc and ninja their temporary files in TMPDIR; multiprocessing and NCCL create shared memory in /dev/shm
(on Linux, where glibc's shm_open and sem_open need it to exist). Each folder is tried by creating a file in it
(or, when it does not exist yet, a folder in its nearest existing parent, as the tool would) and removing exactly
what was created; a cache folder on a `noexec` mount is refused too, because both caches load the libraries they
compile from there. Facts: the folder, and the reason it cannot be used (None when it can).
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import tempfile
from pathlib import Path

from olmo_common.bounded.files import read_text
from olmo_doctor.facts import Facts

PREFIX = ".olmo-doctor-write-test-"


def inductor_cache() -> str:
    """torch._inductor.runtime.cache_dir_utils.cache_dir(), without importing torch."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return os.environ["TORCHINDUCTOR_CACHE_DIR"]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a uid without a passwd entry (containers)
        user = str(os.getuid())
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def triton_cache() -> str:
    """triton's default cache folder: TRITON_CACHE_DIR, else TRITON_HOME (or the home folder)/.triton/cache."""
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".triton", "cache")


MOUNTINFO = Path("/proc/self/mountinfo")
# POSIX shared memory (shm_open, sem_open): multiprocessing's locks and queues, DataLoader workers' batches and
# NCCL's segments between the ranks of a node are files here
SHM = "/dev/shm"


def _holds(point: str, target: str) -> bool:
    """Is target the mount point or below it?"""
    return target == point or target.startswith(point.rstrip("/") + "/")


def _mount_options(path: Path, mountinfo: Path | None = None) -> set[str]:
    """The options of the mount that holds `path` (the longest mount point that is a prefix of it)."""
    best, options = "", set()
    try:
        lines = read_text(mountinfo or MOUNTINFO, "system file", errors="replace").splitlines()
    except OSError:
        return set()
    target = str(path)
    for line in lines:
        fields = line.split()
        if len(fields) < 6:
            continue
        point = fields[4].replace("\\040", " ")
        if _holds(point, target) and len(point) >= len(best):
            best, options = point, set(fields[5].split(","))
    return options


def _existing_parent(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def problem(folder: str, needs_exec: bool = False, must_exist: bool = False) -> str | None:
    """Why `folder` cannot be used as a cache or temp folder, or None. Writes one empty file (or folder) there
    and removes it: nothing the user had is touched. `must_exist`: the tools do not create it (TMPDIR)."""
    path = Path(os.path.abspath(os.path.expanduser(folder)))
    start = _existing_parent(path)
    if must_exist and start != path:
        return f"{path} does not exist"
    if not start.is_dir():
        return f"{start} is not a folder, so {path} cannot be created"
    try:
        if start == path:
            fd, name = tempfile.mkstemp(dir=path, prefix=PREFIX)
            os.close(fd)
            os.unlink(name)
        else:
            os.rmdir(tempfile.mkdtemp(dir=start, prefix=PREFIX))
    except OSError as e:
        what = "write in" if start == path else f"create {path} in"
        return f"cannot {what} {start}: {e.strerror or e}"
    if needs_exec and "noexec" in _mount_options(start.resolve()):
        return f"{start} is on a filesystem mounted noexec, so libraries compiled there cannot be loaded"
    return None


def probe() -> Facts:
    inductor, triton = inductor_cache(), triton_cache()
    tmpdir = os.environ.get("TMPDIR")
    linux = sys.platform.startswith("linux")
    return {
        "paths.inductor_cache": inductor,
        "paths.inductor_cache_error": problem(inductor, needs_exec=True),
        "paths.triton_cache": triton,
        "paths.triton_cache_error": problem(triton, needs_exec=True),
        "paths.tmpdir_error": problem(tmpdir, must_exist=True) if tmpdir else None,
        "paths.shm": SHM if linux else None,
        "paths.shm_error": problem(SHM, must_exist=True) if linux else None,  # missing: sem_open fails too
    }
