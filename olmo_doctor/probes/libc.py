"""glibc and libstdc++ facts, read in-process: the C library's version and the newest GLIBCXX symbol version
that the libstdc++ this Python would load provides (a conda env's copy shadows the system one)."""

from __future__ import annotations

import ctypes
import os
import re

from olmo_common.bounded.files import read_bytes, read_text
from olmo_doctor.compat.versions import version_key
from olmo_doctor.facts import Facts

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
        for line in read_text("/proc/self/maps", "system file", errors="replace").splitlines():
            if "libstdc++.so" in line:
                return line.split()[-1]
    except OSError:
        return None
    return None


def glibcxx_max(path: str) -> str | None:
    try:
        data = read_bytes(path, "library")
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
