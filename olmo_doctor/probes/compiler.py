"""Host C++ compiler facts: the compiler nvcc and torch extensions will use (CXX, else g++)."""

from __future__ import annotations

import os
import shlex

from olmo_doctor.facts import Facts
from olmo_doctor.isolation import safe_path, which
from olmo_doctor.run import Runner


def _version(path: str, run: Runner) -> Facts:
    """The compiler's version; a compiler that gives none to -dumpfullversion is checked for being clang."""
    out = run([path, "-dumpfullversion", "-dumpversion"])
    if out.ok and out.stdout.strip():
        return {"gcc.version": out.stdout.strip().splitlines()[0]}
    ver = run([path, "--version"])
    return {"gcc.is_clang": True} if ver.ok and "clang" in ver.stdout.lower() else {}


def probe(run: Runner) -> Facts:
    cxx_env, cc_env = os.environ.get("CXX"), os.environ.get("CC")
    # torch.utils.cpp_extension compiles with $CXX (default c++); nvcc's host compiler is CUDAHOSTCXX or the
    # first g++/c++ on PATH. CXX first, since flash-attn / xformers builds pass it through.
    compiler = os.environ.get("CUDAHOSTCXX") or cxx_env or "g++"
    path = which(compiler)
    facts: Facts = {"gcc.cc_env": cc_env, "gcc.cxx_env": cxx_env, "gcc.path": path, "gcc.version": None}
    if path:
        facts.update(_version(path, run))
    facts["gcc.alternatives"] = alternatives(run)
    facts["gcc.env_missing"] = env_missing()
    return facts


def env_missing() -> list[str]:
    """CC / CXX / CUDAHOSTCXX entries whose compiler cannot be run: an absolute path that is not an executable
    file, or a bare name not on PATH. A launcher prefix ('ccache gcc') is judged by its first word."""
    bad = []
    for name in ("CC", "CXX", "CUDAHOSTCXX"):
        value = os.environ.get(name)
        if not value or not value.strip():
            continue
        try:
            first = shlex.split(value)[0]
        except (ValueError, IndexError):
            first = value.strip()
        found = which(first)
        if not found:
            bad.append(f"{name}={value}")
    return bad


def _versioned_gxx(folder: str) -> list[tuple[int, str]]:
    """(major, name) of each g++-N in a folder (none when it cannot be listed)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(int(n[4:]), n) for n in names if n.startswith("g++-") and n[4:].isdigit()]


def alternatives(run: Runner) -> list[str]:
    """g++-N binaries on PATH ('13:/usr/bin/g++-13'), so a plan can pick one that nvcc accepts."""
    found: dict[int, str] = {}
    for d in safe_path().split(os.pathsep):
        for major, name in _versioned_gxx(d):
            found.setdefault(major, os.path.join(d, name))
    return [f"{major}:{path}" for major, path in sorted(found.items())]
