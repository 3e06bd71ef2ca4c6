"""Host C++ compiler facts: the compiler nvcc and torch extensions will use (CXX, else g++)."""

from __future__ import annotations

import os
import shlex
import shutil

from olmo_doctor.facts import Facts
from olmo_doctor.run import Runner


def probe(run: Runner) -> Facts:
    cxx_env, cc_env = os.environ.get("CXX"), os.environ.get("CC")
    # torch.utils.cpp_extension compiles with $CXX (default c++); nvcc's host compiler is CUDAHOSTCXX or the
    # first g++/c++ on PATH. CXX first, since flash-attn / xformers builds pass it through.
    compiler = os.environ.get("CUDAHOSTCXX") or cxx_env or "g++"
    path = compiler if os.path.isabs(compiler) else shutil.which(compiler)
    facts: Facts = {"gcc.cc_env": cc_env, "gcc.cxx_env": cxx_env, "gcc.path": path, "gcc.version": None}
    if path:
        out = run([path, "-dumpfullversion", "-dumpversion"])
        if out.ok and out.stdout.strip():
            facts["gcc.version"] = out.stdout.strip().splitlines()[0]
        ver = run([path, "--version"]) if not facts["gcc.version"] else None
        if ver is not None and ver.ok and "clang" in ver.stdout.lower():
            facts["gcc.is_clang"] = True
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
        found = (os.path.isfile(first) and os.access(first, os.X_OK)) if os.path.sep in first else shutil.which(first)
        if not found:
            bad.append(f"{name}={value}")
    return bad


def alternatives(run: Runner) -> list[str]:
    """g++-N binaries on PATH ('13:/usr/bin/g++-13'), so a plan can pick one that nvcc accepts."""
    found: dict[int, str] = {}
    for d in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if name.startswith("g++-") and name[4:].isdigit() and int(name[4:]) not in found:
                found[int(name[4:])] = os.path.join(d, name)
    return [f"{major}:{path}" for major, path in sorted(found.items())]
