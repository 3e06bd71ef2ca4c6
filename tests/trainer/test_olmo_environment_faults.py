"""An environment fault stops `olmo` with the doctor's code in one line and exit 2, never "this is a bug in olmo":
at the gate (`olmo-doctor check --scope train` finds it first), and past it (an exception the doctor's diagnose
recognises as the machine's fault). A real bug still shows its traceback and asks to be reported."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import olmo.cli.main
from olmo.cli import gate
from olmo.errors import OlmoError

CUDA_OOM_AT_START = ("Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
                     "NumCudaDevices() that might have already set an error? Error 2: out of memory")


def _raising(exc: BaseException) -> Callable[..., object]:
    def app(*args: object, **kwargs: object) -> object:
        raise exc
    return app


@pytest.mark.parametrize("exc", [
    RuntimeError(CUDA_OOM_AT_START),
    # https://github.com/haotian-liu/LLaVA/issues/683
    RuntimeError(CUDA_OOM_AT_START.replace("Error 2: out of memory", "Error 802: system not yet initialized")),
    OSError(27, "File too large"),
])
def test_a_fault_of_the_machine_past_the_gate_is_one_line(cli: Callable[..., tuple[int, str, str]],
                                                          monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    monkeypatch.setattr(olmo.cli.main, "app", _raising(exc))  # whatever command was running when it happened
    code, _, err = cli("validate-shards", "data")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err and "bug in olmo" not in err
    assert "olmo-doctor OD" in lines[0] and "olmo-doctor explain OD" in lines[0]


def test_a_bug_stays_a_bug(cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(olmo.cli.main, "app", _raising(KeyError("model.n_layers")))
    code, _, err = cli("validate-shards", "data")
    assert code == 1 and "Traceback" in err and "this is a bug in olmo" in err


def _finding(code: str, title: str, root: str | None = None, command: str = "") -> SimpleNamespace:
    fixes = [SimpleNamespace(commands=[command])] if command else []
    return SimpleNamespace(code=code, title=title, severity="error", root=root, fixes=fixes, message="m")


def test_the_gate_names_root_problems_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo_doctor.api

    found = [_finding("OD270", "A memory limit (ulimit -v 3.8 GiB) is below what CUDA reserves",
                      command="ulimit -v unlimited"),
             _finding("OD278", "CUDA does not start in torch", root="OD270"),
             _finding("OD005", "torch sees no GPU", root="OD270")]
    monkeypatch.setattr(olmo_doctor.api, "run_check", lambda **kw: SimpleNamespace(has_errors=True, findings=found))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(OlmoError) as refused:
        gate.doctor_gate("cuda", skip=False)
    line = str(refused.value)
    assert refused.value.exit_code == 2 and "\n" not in line
    assert line.startswith("olmo-doctor found 1 problem(s) that stop training on cuda: OD270 A memory limit")
    assert "OD278" not in line and "OD005" not in line  # consequences are fixed with their root
    assert "first fix: ulimit -v unlimited" in line


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="on a GPU machine a cuda plan may be fine")
def test_smoke_on_cuda_without_a_gpu_is_refused_in_one_line(cli: Callable[..., tuple[int, str, str]],
                                                           tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real gate on this GPU-less machine: a cuda plan is refused by the doctor's code, in one line."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, _, err = cli("train", "--smoke", "--device", "cuda")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("olmo: olmo-doctor found") and "OD001" in lines[0]


@pytest.mark.parametrize("variable", ["TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR"])
def test_a_folder_an_environment_variable_names_is_named_with_it(variable: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder that fails because a variable points at a file (a red-team pass: TORCHINDUCTOR_CACHE_DIR=<a file>
    past --skip-doctor said only "PATH: File exists"): the line names the variable and what to do with it."""
    import errno

    from olmo.errors import describe_os_error

    target = tmp_path / "afile"
    monkeypatch.setenv(variable, str(target))
    inside = describe_os_error(FileExistsError(errno.EEXIST, "File exists", str(target / "sub")))
    assert f"({variable} names it: point {variable} at a folder you can write, or unset it)" in inside
    monkeypatch.delenv(variable)
    assert describe_os_error(FileExistsError(errno.EEXIST, "File exists", str(target))) == f"{target}: File exists"
