"""The torch-facts cache cannot be stale: each input the worker's answer depends on is changed in turn, and each
change brings a fresh answer (the worker runs again); with nothing changed, the cached answer comes back.

The worker is replaced by a counter, so every answer is distinguishable and nothing imports torch; the inputs are
real (the environment, resource.getrlimit, files and their sizes and times), except where the machine's own state
cannot be changed by a test (the driver file, /dev/nvidia*, the user's groups): there the reader is fed another
value.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo_doctor.probes import dists, torch_key, torch_probe


class Worker:
    """Stands in for the torch worker: counts its runs (and what each was asked), and answers with the run
    number, for torch (unless `--kernels-only`) and for each kernel asked, as the real worker answers."""

    def __init__(self) -> None:
        self.runs = 0
        self.asked: list[list[str]] = []

    def __call__(self, args: list[str], timeout: float) -> tuple[dict[str, object], int]:
        self.runs += 1
        self.asked.append(list(args))
        kernels = [a for a in args if not a.startswith("--")]
        out: dict[str, object] = {} if "--kernels-only" in args else {"torch.cuda_available": False, "run": self.runs}
        for k in kernels:
            out.update({f"{k}.import_ok": True, f"{k}.run": self.runs})
        return out, 0


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Worker]:
    """A fake torch install (its libraries, the nvidia-* CUDA libraries next to it) and a fake kernel with a RECORD."""
    site = tmp_path / "site-packages"
    torch_dir = site / "torch"
    (torch_dir / "lib").mkdir(parents=True)
    (torch_dir / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    (torch_dir / "lib" / "libtorch_cuda.so").write_bytes(b"\x7fELF" + b"\0" * 60)
    (torch_dir / "_C.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF" + b"\0" * 60)
    (site / "nvidia" / "cudnn" / "lib").mkdir(parents=True)
    (site / "nvidia" / "cudnn" / "lib" / "libcudnn.so.9").write_bytes(b"\x7fELF")
    (site / "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    _dist(site, "torch", "2.11.0+cu130", requires=["typing-extensions>=4.10.0", "sympy (>=1.13.3)",
                                                   "opt-einsum>=3.3; extra == 'opt-einsum'"])
    _dist(site, "typing_extensions", "4.15.0")
    (site / "typing_extensions.py").write_text("")
    info = site / "flash_attn-2.8.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n")
    (info / "RECORD").write_text("flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so,,\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    dists._index.cache_clear()
    worker = Worker()
    monkeypatch.setattr(torch_probe, "run_worker", worker)
    yield torch_dir, worker
    dists._index.cache_clear()


def _dist(site: Path, name: str, version: str, requires: tuple[str, ...] | list[str] = ()) -> Path:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    head = "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{head}\nlong text\n")
    (info / "RECORD").write_text(f"{name}.py,,\n")
    return info


def _answer(torch_dir: Path) -> object:
    facts = torch_probe.dynamic_facts(torch_dir, ["flash_attn"])
    return facts["run"], facts["flash_attn.run"]


def _fresh_after(torch_dir: Path, worker: Worker, change: Callable[[], None]) -> bool:
    """Warm the cache, check it answers, make one change: is the next answer a fresh one?"""
    first = _answer(torch_dir)
    runs = worker.runs
    assert _answer(torch_dir) == first and worker.runs == runs, "the unchanged machine is answered from the cache"
    change()
    return _answer(torch_dir) != first


ENV = ["CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_MODULE_LOADING", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA",
       "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCH_CUDA_ARCH_LIST", "TORCHINDUCTOR_CACHE_DIR",
       "TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "TRITON_CACHE_DIR", "TRITON_HOME", "LD_LIBRARY_PATH", "LD_PRELOAD",
       "PATH", "PYTHONPATH", "PYTHONHOME", "HOME", "TMPDIR", "XFORMERS_MORE_DETAILS", "FLASH_ATTENTION_FORCE_BUILD",
       "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "CUDNN_LOGINFO_DBG", "NVIDIA_VISIBLE_DEVICES",
       "GLOO_SOCKET_IFNAME", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "VIRTUAL_ENV", "CONDA_PREFIX"]


@pytest.mark.parametrize("name", ENV)
def test_each_environment_variable_is_in_the_key(probe, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    torch_dir, worker = probe
    assert _fresh_after(torch_dir, worker, lambda: monkeypatch.setenv(name, os.environ.get(name, "") + ":changed"))


RLIMITS = sorted(n for n in dir(resource) if n.startswith("RLIMIT_"))


@pytest.mark.parametrize("name", RLIMITS)
def test_each_resource_limit_is_in_the_key(probe, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Every RLIMIT_* the platform has (the address-space limit that stops CUDA among them)."""
    torch_dir, worker = probe
    real = resource.getrlimit
    constant = getattr(resource, name)

    def lowered(which: int) -> tuple[int, int]:
        soft, hard = real(which)
        return (4_000_000_000 if soft != 4_000_000_000 else 1, hard) if which == constant else (soft, hard)

    assert _fresh_after(torch_dir, worker, lambda: monkeypatch.setattr(resource, "getrlimit", lowered))


def test_a_real_ulimit_changes_the_key(tmp_path: Path) -> None:
    """The key reads the process's real limits: a child under `ulimit -v` computes another key than its parent."""
    code = ("import sys; from pathlib import Path; from olmo_doctor.probes import torch_probe; "
            "print(torch_probe._cache_key(Path(sys.argv[1]), []))")

    def key(limit: str) -> str:
        cmd = f"{limit} exec {sys.executable} -c \"{code}\" {tmp_path}"
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout.strip()

    plain = key("")
    assert plain == key("") and len(plain) == 16
    assert key("ulimit -v 8000000;") != plain
    assert key("ulimit -t 100000;") != plain


def test_the_driver_version_is_in_the_key(probe, monkeypatch: pytest.MonkeyPatch) -> None:
    torch_dir, worker = probe
    real = torch_key._read

    def upgraded(path: str) -> str:
        return "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06" if "nvidia" in path else real(path)

    assert _fresh_after(torch_dir, worker, lambda: monkeypatch.setattr(torch_key, "_read", upgraded))


def test_device_files_and_groups_are_in_the_key(probe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Access to the GPUs: the /dev/nvidia* files' modes and owners, and the groups of this user."""
    torch_dir, worker = probe
    device = tmp_path / "nvidia0"
    device.write_text("")
    device.chmod(0o666)
    real_glob = torch_key.glob.glob
    monkeypatch.setattr(torch_key.glob, "glob", lambda p: [str(device)] if p == "/dev/nvidia*" else real_glob(p))
    assert _fresh_after(torch_dir, worker, lambda: device.chmod(0o600))
    assert _fresh_after(torch_dir, worker, lambda: monkeypatch.setattr(os, "getgroups", lambda: [4242]))


def _grow(path: Path) -> Callable[[], None]:
    return lambda: path.write_bytes(path.read_bytes() + b"\0")


def _touch(path: Path) -> Callable[[], None]:
    def change() -> None:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    return change


@pytest.mark.parametrize("rel", ["version.py", "lib/libtorch_cuda.so", "_C.cpython-312-x86_64-linux-gnu.so",
                                 "../nvidia/cudnn/lib/libcudnn.so.9",
                                 "../flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so"])
@pytest.mark.parametrize("how", ["size", "mtime"])
def test_size_and_time_of_torch_and_kernel_files_are_in_the_key(probe, rel: str, how: str) -> None:
    torch_dir, worker = probe
    path = (torch_dir / rel).resolve()
    assert _fresh_after(torch_dir, worker, _grow(path) if how == "size" else _touch(path))


def test_a_stub_libcuda_dropped_into_ld_library_path_is_in_the_key(probe, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    torch_dir, worker = probe
    folder = tmp_path / "libs"
    folder.mkdir()
    monkeypatch.setenv("LD_LIBRARY_PATH", str(folder))
    assert _fresh_after(torch_dir, worker, lambda: (folder / "libcuda.so.1").write_bytes(b"stub"))


def test_a_package_torch_imports_is_in_the_key(probe, tmp_path: Path) -> None:
    """torch's requirements (transitively) by their installed metadata and where their module is found first:
    reinstalled, upgraded, installed where it was missing, or shadowed by a copy earlier on sys.path."""
    torch_dir, worker = probe
    site = torch_dir.parent
    record = site / "typing_extensions-4.15.0.dist-info" / "RECORD"
    assert _fresh_after(torch_dir, worker, _touch(record))  # reinstalled
    assert _fresh_after(torch_dir, worker, lambda: _dist(site, "sympy", "1.14.0", requires=["mpmath<1.4"]))
    assert _fresh_after(torch_dir, worker, lambda: _dist(site, "mpmath", "1.3.0"))  # sympy's own requirement
    shadow = tmp_path / "shadow"
    shadow.mkdir()

    def shadowed() -> None:
        (shadow / "typing_extensions.py").write_text("")
        sys.path.insert(0, str(shadow))

    try:
        assert _fresh_after(torch_dir, worker, shadowed)
    finally:
        sys.path.remove(str(shadow))


def test_code_python_runs_at_start_up_is_in_the_key(probe) -> None:
    """A .pth file in a site folder runs in every Python process, the worker's too."""
    torch_dir, worker = probe
    site = torch_dir.parent
    assert _fresh_after(torch_dir, worker, lambda: (site / "hook.pth").write_text("import os\n"))


def test_an_unrelated_package_installed_beside_torch_asks_nothing(probe) -> None:
    """A package nothing here imports (its own folder and dist-info; site-packages' time changes) keeps the
    answer: installing it cannot change what torch or the kernel import."""
    torch_dir, worker = probe
    site = torch_dir.parent
    first = _answer(torch_dir)

    def install() -> None:
        _dist(site, "rich", "14.0.0")
        (site / "rich").mkdir()
        _touch(site)()

    install()
    assert _answer(torch_dir) == first and worker.runs == 1


def test_replacing_a_kernel_asks_the_worker_about_that_kernel_only(probe) -> None:
    """What build-kernels' install does to a kernel (its extension and dist-info rewritten, site-packages'
    time changed): torch's answer stays cached; the kernel is asked again, alone, with --kernels-only; and a
    check that does not ask about that kernel (build-kernels, replacing it) runs no worker at all."""
    torch_dir, worker = probe
    site = torch_dir.parent
    assert _answer(torch_dir) == (1, 1) and worker.asked == [["flash_attn"]]
    extension = site / "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so"
    extension.write_bytes(extension.read_bytes() + b"rebuilt")
    _touch(site / "flash_attn-2.8.3.dist-info" / "RECORD")()
    _touch(site)()
    assert torch_probe.dynamic_facts(torch_dir, [])["run"] == 1 and worker.runs == 1  # torch's part: cached
    assert _answer(torch_dir) == (1, 2) and worker.asked[1:] == [["--kernels-only", "flash_attn"]]
    assert _answer(torch_dir) == (1, 2) and worker.runs == 2


def test_nothing_changed_means_one_worker_run(probe) -> None:
    torch_dir, worker = probe
    answers = {_answer(torch_dir) for _ in range(3)}
    assert answers == {(1, 1)} and worker.runs == 1


def test_the_library_ld_preload_names_is_in_the_key(probe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LD_PRELOAD names a library that is missing (the loader says so in the worker); installing it later is a
    new answer, although no variable changed."""
    torch_dir, worker = probe
    lib = tmp_path / "libjemalloc.so.2"
    monkeypatch.setenv("LD_PRELOAD", f"/nonexistent/libtcmalloc.so {lib}")
    assert _fresh_after(torch_dir, worker, lambda: lib.write_bytes(b"\x7fELF"))
