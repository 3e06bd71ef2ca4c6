"""Fake kernel installs whose extension fails in the real dynamic loader, for bench/faults.sh and the tests.

    python bench/fake_kernels.py SITE KERNEL KIND

writes into the folder SITE (put it first on PYTHONPATH) a distribution of KERNEL (flash_attn, flash_attn_3,
xformers, torchao: a dist-info and the extension module the torch worker imports) whose compiled file fails the way
KIND says, each with the loader's own words:

    corrupt           not an ELF file at all            -> "invalid ELF header"
    truncated         the first bytes of a real library -> "file too short"
    missing-library   a real library whose DT_NEEDED names a library that does not exist
                                                        -> "libtorch_pythoX.so: cannot open shared object file"
    undefined-symbol  a real library one of whose undefined symbols was renamed
                                                        -> "undefined symbol: initModulw"
    other-arch        a real library marked for another processor (an aarch64 wheel on x86_64, or the reverse)
                                                        -> "wrong ELF class" / "cannot open shared object file"

The real library is a copy of torch's own small `_C` extension (present wherever torch is), patched in place:
strings of the same length, so every offset in the file stays valid.
"""

from __future__ import annotations

import importlib.machinery
import struct
import sys
from importlib.util import find_spec
from pathlib import Path

# kernel key -> (distribution, version, the module the torch worker imports)
LAYOUT = {"flash_attn": ("flash_attn", "2.8.3", "flash_attn_2_cuda"),
          "flash_attn_3": ("flash_attn_3", "3.0.0", "flash_attn_interface"),
          "xformers": ("xformers", "0.0.35", "xformers.ops"),
          "torchao": ("torchao", "0.18.0", "torchao.float8")}
KINDS = ("corrupt", "truncated", "missing-library", "undefined-symbol", "other-arch")
EM_X86_64, EM_AARCH64 = 62, 183  # ELF e_machine values


def torch_extension() -> Path:
    """torch's `_C` extension module: a small shared library that links libtorch_python."""
    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        raise SystemExit("fake_kernels: torch is not importable here")
    found = sorted(Path(spec.origin).parent.glob("_C.*.so"))
    if not found:
        raise SystemExit("fake_kernels: torch has no _C extension module next to it")
    return found[0]


def undefined_symbols(data: bytes) -> list[bytes]:
    """Names of the global undefined symbols in an ELF64 little-endian shared object's .dynsym."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 11:  # SHT_DYNSYM
            continue
        strtab = sections[link]
        for i in range(1, size // (entsize or 24)):
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, offset + i * 24)
            if st_shndx == 0 and st_info >> 4 == 1:  # undefined, STB_GLOBAL (a weak one may stay missing)
                start = strtab[4] + st_name
                names.append(data[start:data.index(b"\0", start)])
    return names


def patched(kind: str) -> bytes:
    data = torch_extension().read_bytes()
    if kind == "corrupt":
        return b"this file is not a shared library\n" * 8
    if kind == "truncated":
        return data[:40]  # shorter than an ELF header
    if kind == "other-arch":  # e_machine (offset 18) of the other of the two processors GPU servers have
        machine, = struct.unpack_from("<H", data, 18)
        return data[:18] + struct.pack("<H", EM_AARCH64 if machine != EM_AARCH64 else EM_X86_64) + data[20:]
    if kind == "missing-library":
        needed = b"libtorch_python.so\0"
        if needed not in data:
            raise SystemExit("fake_kernels: torch's _C does not link libtorch_python.so")
        return data.replace(needed, b"libtorch_pythoX.so\0")
    for name in undefined_symbols(data):  # torch's _C references initModule, which libtorch_python defines
        renamed = name[:-1] + (b"w" if name[-1:] != b"w" else b"x")
        if renamed + b"\0" not in data:  # every copy of the name (.dynstr, .strtab) renamed alike
            return data.replace(name + b"\0", renamed + b"\0")
    raise SystemExit("fake_kernels: no undefined symbol to rename in torch's _C")


def install(site: Path, kernel: str, kind: str) -> Path:
    """Write the fake distribution into `site`; returns the broken extension file."""
    dist, version, module = LAYOUT[kernel]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    parts = module.split(".")
    target = site.joinpath(*parts[:-1], parts[-1] + suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    if len(parts) > 1:
        (target.parent / "__init__.py").write_text("")
    target.write_bytes(patched(kind))
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{target.relative_to(site)},,\n{info.name}/METADATA,,\n")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[2] not in LAYOUT or sys.argv[3] not in KINDS:
        raise SystemExit(f"usage: fake_kernels.py SITE {{{','.join(LAYOUT)}}} {{{','.join(KINDS)}}}")
    print(install(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
