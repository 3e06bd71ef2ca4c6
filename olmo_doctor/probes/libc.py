"""glibc and libstdc++ facts, read in-process: the C library's version and the newest GLIBCXX symbol version
that the libstdc++ this Python would load provides (a conda env's copy shadows the system one)."""

from __future__ import annotations

import ctypes
import os
import re

from olmo_doctor.facts import Facts
from olmo_doctor.versions import version_key

GLIBCXX = re.compile(rb"GLIBCXX_(3\.4(?:\.\d+)?)\x00")


def glibc_version() -> str | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.39"
    except (AttributeError, ValueError, OSError):
        return None
    return text.split()[-1] if text and text.startswith("glibc") else None


def loaded_libstdcxx() -> str | None:
    """Load libstdc++.so.6 the way an extension would and read back which file the loader picked."""
    try:
        ctypes.CDLL("libstdc++.so.6")
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libstdc++.so" in line:
                    return line.split()[-1]
    except OSError:
        return None
    return None


def glibcxx_max(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    versions = {m.decode() for m in GLIBCXX.findall(data)}
    if not versions:
        return None
    return max(versions, key=version_key)


def probe() -> Facts:
    path = loaded_libstdcxx()
    return {
        "glibc.version": glibc_version(),
        "libstdcxx.path": path,
        "libstdcxx.glibcxx_max": glibcxx_max(path) if path else None,
    }
