"""What a failed import of a compiled extension means, read from the loader's own words.

An extension module (a kernel's `.so`) that cannot be imported fails in the dynamic loader (glibc's ld.so, macOS
dyld, Windows' LoadLibrary), which names the reason in a fixed phrase. `classify` turns that text into one of a
few kinds, each with its own fix:

    corrupt          the file itself is not a loadable library (truncated, empty, another file's content, another
                     architecture, which glibc reports as "cannot open shared object file" for the file itself):
                     reinstall it
    abi              it references a symbol the loaded libraries do not export (built against another torch)
    missing_library  a library it links cannot be found (not installed, or not on the loader's path)
    cuda_runtime     that missing library is a CUDA runtime of another major version (built for another CUDA)
    libc             it needs a newer glibc / libstdc++ than this system has (built on a newer system)
    cannot_map       the loader could not map it into memory, or its import ran out of memory (a noexec mount, an
                     address-space limit)
    crashed          importing it killed the interpreter (a fatal error inside its initialisation)
    python_dependency  the Python code around it needs a package that is not installed
    other            anything else: the finding quotes the error as it is

Sources for the phrases (glibc's dl-load.c and dl-lookup.c messages; real reports): flashinfer #2010 ("invalid
ELF header" after an interrupted compile), second.pytorch #339 and kitty #508 ("file too short"), qpdf #895 (a
symlink unpacked as a text file), flash-attention #1691 ("undefined symbol"), pyarmor #682 ("cannot open shared
object file"), oobabooga/textgen #4344 (Windows "DLL load failed ... module could not be found").
"""

from __future__ import annotations

import re

KINDS = ("corrupt", "abi", "missing_library", "cuda_runtime", "libc", "cannot_map", "crashed",
         "python_dependency", "other")

# An extension module's own file, named by its absolute path, that the loader "cannot open ... No such file": the
# import system found the file there, so the loader refused it. glibc says exactly this for a library built for
# another processor (an aarch64 wheel on x86_64: open_verify rejects its e_machine and reports ENOENT). A library
# it links is named by its bare soname instead (libfoo.so.1), and stays `missing_library`.
_OWN_FILE_REFUSED = (r"/[^\s:'\"]*(?:\.cpython-[^\s/:'\"]+\.so|\.abi3\.so|/(?:site|dist)-packages/[^\s:'\"]+\.so): "
                     r"cannot open shared object file: No such file or directory")

# (kind, pattern), first match wins: the most specific phrases first
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(pattern, re.I)) for kind, pattern in (
    ("crashed", r"killed the Python process|Fatal Python error"),
    ("libc", r"\b(?:GLIBC|GLIBCXX|CXXABI)_[\d.]+\W{0,3} not found"),
    ("cuda_runtime", r"lib(?:cudart|cublas(?:Lt)?|nvrtc)\.so\.\d+(?:\.\d+)*: cannot open shared object file"),
    ("corrupt", r"invalid ELF header|file too short|ELF load command (?:past end of file|address/offset not "
                r"(?:properly|page)[- ]aligned)|wrong ELF class|ELF file (?:data encoding|version|OS ABI|ABI "
                r"version)|only ET_DYN and ET_EXEC can be loaded|cannot read file data|ELF file's phentsize|"
                r"not a dynamic executable|is not a valid Win32 application|not a mach-o file|mach-o file, but is "
                r"an incompatible architecture|truncated mach-o|dynamic module does not define module export "
                r"function|bad ELF magic|unexpected reloc type|" + _OWN_FILE_REFUSED),
    ("cannot_map", r"failed to map segment from shared object|cannot enable executable stack|cannot allocate "
                   r"memory in static TLS block|cannot create shared object descriptor|cannot map zero-fill"),
    ("abi", r"undefined symbol|Symbol not found|The specified procedure could not be found"),
    ("missing_library", r"cannot open shared object file|Library not loaded|image not found|DLL load failed "
                        r"while importing \w+: The specified module could not be found"),
    ("python_dependency", r"No module named|cannot import name"),
))


def classify(error: object) -> str | None:
    """The kind of a failed import, from its error text; None when there is no error text."""
    if not isinstance(error, str) or not error.strip():
        return None
    for kind, pattern in _PATTERNS:
        if pattern.search(error):
            return kind
    return "cannot_map" if memory_failure(error) else "other"  # a MemoryError, an allocation that failed


# how the Kernels line of `check` names each kind, short
LABELS = {
    "corrupt": "does not load: its file is damaged",
    "abi": "does not load: built against another torch",
    "missing_library": "does not load: a library it needs is missing",
    "cuda_runtime": "does not load: built for another CUDA",
    "libc": "does not load: needs a newer glibc/libstdc++",
    "cannot_map": "does not load: the loader cannot map it",
    "crashed": "does not load: importing it kills Python",
    "python_dependency": "does not load: a Python package it needs is missing",
    "other": "does not load",
}


def library_named(error: object) -> str | None:
    """The library a `missing_library` / `cuda_runtime` error names (`libfoo.so.1`), when it names one."""
    m = re.search(r"([\w.+-]+\.(?:so(?:\.\d+)*|dylib|dll))\W{0,3}(?::|\s)\s*cannot open shared object file",
                  str(error or ""))
    if m:
        return m.group(1)
    m = re.search(r"Library not loaded:\s*(\S+)", str(error or ""))
    return m.group(1).rsplit("/", 1)[-1] if m else None


# A process that ran out of room for its own memory, in the words of each layer that says so: the dynamic
# loader mapping a library (glibc dl-load.c; pytorch #16558 reproduces it with RLIMIT_AS and `import torch`,
# numpy #14148, futapi/fut #42 with ": Cannot allocate memory" appended), errno ENOMEM from mmap/fork/clone,
# Python's MemoryError and its thread start (conda #7040), the C++ runtime (std::bad_alloc), OpenBLAS giving up
# on its buffers and exiting (OpenMathLib/OpenBLAS #5289, #5303), Rust's allocation-failure abort (tokenizers),
# and CUDA's runtime when it cannot reserve host memory as it starts (cudaGetDeviceCount ... Error 2).
_MEMORY = re.compile(
    r"failed to map segment from shared object|cannot map zero-fill pages|cannot allocate memory|"
    r"\bENOMEM\b|\[Errno 12\]|\bMemoryError\b|std::bad_alloc|\bbad_alloc\b|"
    r"Memory allocation still failed|memory allocation of \d+ bytes failed|malloc failed|"
    r"can't start new thread|Failed to create new thread|Thread creation failed|pthread_create failed|"
    r"Error 2: out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|"
    r"\bout of memory\b(?=.{0,80}(?:cuInit|cudaGetDeviceCount|initiali[sz]))", re.I)
# the same words for something else: the GPU's own memory (a device OOM: batch too large), or glibc's static TLS
# surplus (a library loaded late, whatever the limits)
_NOT_PROCESS_MEMORY = re.compile(r"CUDA out of memory\. Tried to allocate|OutOfMemoryError|in static TLS block|"
                                 r"CUBLAS_STATUS_ALLOC_FAILED", re.I)


def memory_failure(error: object) -> bool:
    """Whether an error says this process could not map or allocate memory for itself (a library's segments,
    a thread's stack, a buffer), which is what a memory limit (ulimit -v / -d) makes happen first."""
    text = str(error or "")
    return bool(_MEMORY.search(text)) and not _NOT_PROCESS_MEMORY.search(text)
