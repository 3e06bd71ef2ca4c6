"""Get the source a plan builds: the recipe's sdist (pip download from the package registry, sha256 checked,
cached under the user cache), a local sdist file, or a source tree (`--source PATH`); always into a private
copy under the plan's work dir, because subsets edit it and pip builds in place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from olmo_common.bounded.files import sha256_file
from olmo_doctor.build.recipes import Recipe
from olmo_doctor.errors import UsageError
from olmo_doctor.isolation import child_env
from olmo_doctor.resources import user_cache_dir


def sdist_cache_dir() -> Path:
    return user_cache_dir() / "sdists"


def fetch_sdist(recipe: Recipe, python: str, cache: Path | None = None, timeout: float = 600) -> Path:
    """The recipe's sdist from the cache, else downloaded with pip (hash-pinned); UsageError when offline."""
    cache = cache or sdist_cache_dir()
    target = cache / recipe.sdist
    if target.is_file() and sha256_file(target) == recipe.sha256:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{recipe.package}=={recipe.version} --hash=sha256:{recipe.sha256}\n")
        # pip prepares metadata for an sdist it downloads: without isolation (setup.py imports torch) and
        # without compiling anything (flash-attn's SKIP_CUDA_BUILD only affects this metadata step).
        env = child_env(user_paths=True, base={**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"})
        argv = [
            python,
            "-I",  # pip itself from the environment, never a pip/ of the working folder
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            "--require-hashes",
            "-d",
            tmp,
            "-r",
            str(req),
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as e:
            raise UsageError(f"could not run pip to download {recipe.sdist}: {e}") from e
        got = Path(tmp) / recipe.sdist
        if proc.returncode != 0 or not got.is_file():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(
                f"could not download {recipe.package}=={recipe.version} ({last}); offline? "
                f"put {recipe.sdist} in {cache} or pass --source PATH"
            )
        if sha256_file(got) != recipe.sha256:
            raise UsageError(f"{recipe.sdist} does not match the recipe's sha256; refusing to build it")
        os.replace(got, target)
    return target


def fingerprint(source: Path) -> str:
    """What identifies a --source for the wheel cache: a file's sha256, a tree's file names, sizes and
    modification times (so an edited or updated checkout at the same path never reuses a stale wheel)."""
    if source.is_file():
        return sha256_file(source)
    h = hashlib.sha256()
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "build", "dist", "__pycache__"))
        for name in sorted(files):
            st = (Path(root) / name).stat()
            h.update(f"{os.path.relpath(root, source)}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def check_tree(tree: Path, recipe: Recipe) -> None:
    """A git checkout without submodules has no CUTLASS; say so before a compile fails on cute/tensor.hpp."""
    if not (tree / recipe.subdir / "setup.py").is_file():
        raise UsageError(f"{tree / recipe.subdir} has no setup.py; pass a {recipe.package} source tree or sdist")
    if not (tree / recipe.submodule_marker).is_file():
        hint = (
            f"cd {tree} && {recipe.submodule_fix}"
            if (tree / ".git").exists()
            else f"use the PyPI sdist (drop --source) or a `git clone --recursive` of {recipe.package}"
        )
        raise UsageError(
            f"{tree / recipe.submodule_marker} is missing (a git checkout without submodules?); run: {hint}"
        )


# An sdist of flash-attn or xformers unpacks to well under 200 MB in a few thousand files; anything past these
# bounds is a decompression bomb, refused before its bytes are written.
MAX_UNPACKED = 2 * 2**30
MAX_MEMBERS = 200_000


def _bounded(count: int, total: int, sdist: Path) -> None:
    if count > MAX_MEMBERS or total > MAX_UNPACKED:
        raise UsageError(f"{sdist} unpacks to more than {MAX_UNPACKED >> 30} GiB or {MAX_MEMBERS} files; "
                         "not an sdist (a decompression bomb?)")


def _escapes(name: str, parts: list[str]) -> bool:
    """An absolute name, a `..` in it, or no name at all."""
    return name.startswith("/") or ".." in parts or not parts


def _check_member(m: tarfile.TarInfo, parts: list[str], sdist: Path) -> None:
    """A plain name under one top folder; a regular file, folder or link; a link whose target stays inside."""
    if _escapes(m.name, parts):
        raise UsageError(f"{sdist}: member {m.name[:200]!r} points outside one top folder; not an sdist")
    if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
        raise UsageError(f"{sdist}: member {m.name[:200]!r} is a device, fifo or other special file; "
                         "not an sdist")
    if m.issym() or m.islnk():
        _check_link(m, parts, sdist)


def _check_link(m: tarfile.TarInfo, parts: list[str], sdist: Path) -> None:
    """A link's target stays inside the top folder too (a hard link names it from the archive's root)."""
    base = "/".join(parts[:-1]) if m.issym() else ""
    target = os.path.normpath(os.path.join(base, m.linkname)).split(os.sep)
    if m.linkname.startswith("/") or target[0] != parts[0]:
        raise UsageError(f"{sdist}: link {m.name[:200]!r} points outside the sdist ({m.linkname[:200]!r})")


def _name_parts(name: str) -> list[str]:
    """A member's path as its parts, without empty and "." ones (`tar -C dir .` writes ./pkg/)."""
    return [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]


def _members(tar: tarfile.TarFile, sdist: Path) -> str:
    """Check every member before anything is written; returns the one top-level folder.

    Only regular files, folders and links are allowed, each under one top folder, no `..`, no absolute names,
    within MAX_UNPACKED bytes and MAX_MEMBERS entries. Checked here for every Python: the `data` filter
    (extractall below) also refuses links out of the tree, but older Pythons have none."""
    top: str | None = None
    total = 0
    for count, m in enumerate(tar, 1):  # lazily: a bomb is refused at the header crossing a bound, not after it all
        total += max(m.size, 0)
        _bounded(count, total, sdist)
        parts = _name_parts(m.name)
        if not parts and m.isdir():
            continue  # the archive's own "./" folder
        _check_member(m, parts, sdist)
        if top is not None and parts[0] != top:
            raise UsageError(f"{sdist} is not an sdist (one top-level folder expected)")
        top = parts[0]
    if top is None:
        raise UsageError(f"{sdist} is empty; not an sdist")
    return top


def _unpack(sdist: Path, dest: Path) -> None:
    # a fresh folder of this call's (a fixed name could be a link planted to extract the archive elsewhere)
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".unpack-"))
    try:
        # "r:gz": an sdist is a .tar.gz (the only name --source accepts), so a file that is xz inside (whose
        # header may ask for a 1.5 GiB dictionary) or bz2 is refused instead of auto-detected
        with tarfile.open(sdist, "r:gz") as tar:
            top = _members(tar, sdist)
            try:
                tar.extractall(staging, filter="data")
            except TypeError:  # Python < 3.10.12 has no extraction filters; _members checked the names
                tar.extractall(staging)
        if not (staging / top).is_dir() or (staging / top).is_symlink():
            raise UsageError(f"{sdist}: its top-level entry {top!r} is not a folder; not an sdist")
        shutil.move(str(staging / top), dest)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:  # corrupt gzip, links out (FilterError), ...
        raise UsageError(f"{sdist} cannot be unpacked safely ({e}); pass a source folder or a sound sdist") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare(recipe: Recipe, source: str | None, work_dir: Path, python: str, sha256: str | None = None) -> Path:
    """A fresh private source tree at work_dir/src, checked for submodules; returns its path.
    `sha256`: what a --source archive hashed to when the plan was made; a private copy must match before unpacking."""
    dest = work_dir / "src"
    if dest.is_symlink():  # our build folder's name: a link there loses only the link, never what it points at
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)  # the source tree an earlier build of this plan unpacked into olmo-doctor's cache
    work_dir.mkdir(parents=True, exist_ok=True)
    if source is None:
        _unpack(fetch_sdist(recipe, python), dest)
    else:
        path = Path(source).expanduser()
        if path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
            private = work_dir / path.name  # a private copy: the file checked is the file unpacked
            shutil.copyfile(path, private)
            if sha256 is not None and sha256_file(private) != sha256:
                private.unlink()
                raise UsageError(f"--source {source} changed since the plan hashed it (sha256 {sha256}); "
                                 "refusing to build it")
            _unpack(private, dest)
            private.unlink()
        elif path.is_dir():
            check_tree(path, recipe)
            shutil.copytree(path, dest, symlinks=True, ignore=shutil.ignore_patterns(".git", "build", "dist"))
        else:
            raise UsageError(f"--source {source}: not a source folder or .tar.gz sdist")
    check_tree(dest, recipe)
    return dest
