"""A failed import is classified by the loader's own words, on error texts as public threads show them (each case
names its source), for every family: a damaged file, an ABI mismatch, a missing library, a CUDA runtime of another
major, a glibc too old, a file the loader cannot map, a crash, a missing Python dependency; and the finding each
kernel then gets, under every scope."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fake_kernels import install
from olmo_doctor.loader_errors import classify, library_named
from olmo_doctor.rules.engine import run_rules

CASES = [
    # a wheel for another processor: glibc names the extension's own path and says "No such file" (bench/fake_kernels
    # other-arch reproduces it); a library it links is named by its bare soname instead
    ("ImportError: /v/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: cannot open shared object "
     "file: No such file or directory", "corrupt"),
    ("ImportError: /usr/lib/python3/dist-packages/xformers/_C.so: cannot open shared object file: No such file or "
     "directory", "corrupt"),
    ("ImportError: libc10_cuda.so: cannot open shared object file: No such file or directory", "missing_library"),
    # https://github.com/flashinfer-ai/flashinfer/issues/2010 (an interrupted compile left a partial .so)
    ("OSError: /.cache/flashinfer/90/cached_ops/sampling/sampling.so: invalid ELF header", "corrupt"),
    # https://github.com/traveller59/second.pytorch/issues/339
    ("ImportError: /home/mike/.local/lib/python3.7/site-packages/spconv/spconv_utils.cpython-37m-x86_64-linux-gnu.so:"
     " file too short", "corrupt"),
    # https://github.com/qpdf/qpdf/issues/895 (a symlink unpacked as a text file)
    ("error while loading shared libraries: ~/qpdf-10.6.3-bin-linux-x86_64/bin/../lib/libqpdf.so.28: file too short",
     "corrupt"),
    ("ImportError: /opt/x/_C.so: wrong ELF class: ELFCLASS32", "corrupt"),
    ("ImportError: dynamic module does not define module export function (PyInit_flash_attn_2_cuda)", "corrupt"),
    ("ImportError: DLL load failed while importing _C: %1 is not a valid Win32 application.", "corrupt"),
    # https://github.com/Dao-AILab/flash-attention/issues/1691
    ("ImportError: /data/user/miniconda3/envs/quanllm/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-"
     "x86_64-linux-gnu.so: undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_"
     "traitsIcESaIcEEE", "abi"),
    # https://github.com/StarsfieldAI/R1-V/issues/127
    ("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
     "_ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv", "abi"),
    ("ImportError: dlopen(/x/_C.so, 0x0002): Symbol not found: __ZN3c105ErrorC1ENS_14SourceLocationENSt3__112basic_"
     "stringIcNS2_11char_traitsIcEENS2_9allocatorIcEEEE", "abi"),
    # https://github.com/oobabooga/textgen/issues/4344
    ("ImportError: DLL load failed while importing flash_attn_2_cuda: The specified module could not be found.",
     "missing_library"),
    # https://github.com/dashingsoft/pyarmor/issues/682
    ("ImportError: libpython3.10.so.1.0: cannot open shared object file: No such file or directory",
     "missing_library"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "cuda_runtime"),
    ("ImportError: libcublasLt.so.11: cannot open shared object file: No such file or directory", "cuda_runtime"),
    # https://github.com/Dao-AILab/flash-attention/issues/1708
    ("ImportError: /lib64/libc.so.6: version `GLIBC_2.32' not found (required by flash_attn_2_cuda.cpython-311-"
     "x86_64-linux-gnu.so)", "libc"),
    ("ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found", "libc"),
    ("ImportError: /tmp/noexec/x/_C.so: failed to map segment from shared object", "cannot_map"),
    ("ImportError: libgomp.so.1: cannot allocate memory in static TLS block", "cannot_map"),
    ("importing it killed the Python process (SIGABRT)", "crashed"),
    ("ModuleNotFoundError: No module named 'einops'", "python_dependency"),
    ("RuntimeError: some other failure", "other"),
]


@pytest.mark.parametrize(("error", "kind"), CASES, ids=[k + str(i) for i, (_, k) in enumerate(CASES)])
def test_classify(error: str, kind: str) -> None:
    assert classify(error) == kind


def test_no_error_text_is_no_claim() -> None:
    assert classify(None) is None and classify("  ") is None


def test_library_named() -> None:
    assert library_named("ImportError: libcudart.so.12: cannot open shared object file: x") == "libcudart.so.12"
    assert library_named("dlopen(x): Library not loaded: @rpath/libc10.dylib") == "libc10.dylib"
    assert library_named("undefined symbol: foo") is None


# (error text, kernel key, the rule that must name it): the package's own rule where it has one, else the
# generic one for the family; every kernel failure gets exactly one finding under every scope
PAIRS = [
    ("ImportError: /v/flash_attn_2_cuda.so: file too short", "flash_attn", "OD290"),
    ("ImportError: /v/flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "flash_attn", "OD160"),
    ("ImportError: dlopen(/v/flash_attn_2_cuda.so, 2): Symbol not found: __ZN3c104cuda9SetDeviceEi", "flash_attn",
     "OD160"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "flash_attn", "OD112"),
    ("ImportError: libcudart.so.12: cannot open shared object file: No such file or directory", "xformers", "OD291"),
    ("ImportError: /lib64/libc.so.6: version `GLIBC_2.32' not found", "flash_attn", "OD167"),
    ("ImportError: /lib64/libc.so.6: version `GLIBC_2.32' not found", "flash_attn_3", "OD292"),
    ("OSError: /v/xformers/_C.so: undefined symbol: _ZN2at4_ops5zeros4callE", "xformers", "OD161"),
    ("ImportError: /v/torchao/_C.abi3.so: undefined symbol: _ZN3c104impl3cow11cow_deleterEPv", "torchao", "OD244"),
    ("ImportError: /v/torchao/_C.abi3.so: invalid ELF header", "torchao", "OD290"),
    ("ImportError: /v/site-packages/flash_attn_2_cuda.cpython-312-aarch64-linux-gnu.so: cannot open shared object "
     "file: No such file or directory", "flash_attn", "OD290"),
    ("ImportError: libfoo.so.2: cannot open shared object file: No such file or directory", "torchao", "OD291"),
    ("ImportError: /mnt/x/flash_attn_2_cuda.so: failed to map segment from shared object", "flash_attn", "OD293"),
    ("ModuleNotFoundError: No module named 'einops'", "flash_attn", "OD293"),
]
KERNEL_CODES = {"OD112", "OD160", "OD161", "OD167", "OD240", "OD244", "OD290", "OD291", "OD292", "OD293"}


@pytest.mark.parametrize("scope", ["install", "train", "all"])
@pytest.mark.parametrize(("error", "kernel", "code"), PAIRS, ids=[f"{k}-{c}" for _, k, c in PAIRS])
def test_each_failed_kernel_gets_one_finding_in_every_scope(error: str, kernel: str, code: str, scope: str) -> None:
    facts = {"torch.version": "2.11.0+cu130", f"{kernel}.version": "1.0", f"{kernel}.import_ok": False,
             f"{kernel}.import_error": error}
    found = [f.code for f in run_rules(facts, scope=scope) if f.code in KERNEL_CODES]
    assert found == [code], (scope, found)


def test_a_kernel_built_for_another_processor_is_a_damaged_file_in_the_real_loader(tmp_path: Path) -> None:
    """torch's own extension marked for the other processor GPU servers have (x86_64 <-> aarch64), imported in a
    real interpreter: the loader's words are classified as the file's fault, not a missing library."""
    target = install(tmp_path, "flash_attn", "other-arch")
    proc = subprocess.run([sys.executable, "-c", "import flash_attn_2_cuda"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=120)
    said = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and str(target) in said, proc.stderr
    assert classify(said) == "corrupt"
