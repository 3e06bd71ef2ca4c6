"""Test helpers shared by every test file: fixture paths, hardware requirements as marks, the CLI in a fresh
process, the findings a rule's own test case produces, golden-file comparison and a stand-in torch.

Requirements are marks, not hand-written skipifs: `@requires_gpu()` marks a test `gpu` (deselected by the
README's command, run on a GPU machine with `-m gpu`) and skips it, saying why, where no CUDA GPU is visible;
`@requires_cuda_toolkit` marks a test `slow` and skips it where no nvcc + headers are installed.
"""

from __future__ import annotations

import difflib
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
CORPUS = FIXTURES / "corpus" / "failure_logs.jsonl"  # real failure reports from public issue trackers
GOLDENS = ROOT / "tests" / "goldens"
UPDATE_GOLDENS_ENV = "OLMO_UPDATE_GOLDENS"  # set to 1 (or pass --update-goldens) to rewrite the golden files
REGENERATE = (".venv/bin/python -m pytest -q tests/doctor/test_goldens.py tests/trainer/test_golden_loss.py "
              "--update-goldens")

T = TypeVar("T")


def stand_in_torch(cuda: str | None = None, archs: tuple[str, ...] = (), available: bool = False,
                   devices: int | None = None) -> str:
    """The source of a stand-in `torch` package (it imports in milliseconds) with what the torch worker reads: the
    C++ ABI, the CUDA it was built for, cuDNN (absent), the arch list and whether CUDA starts."""
    count = "" if devices is None else f"    @staticmethod\n    def device_count():\n        return {devices}\n"
    return ("\nclass _C:\n    _GLIBCXX_USE_CXX11_ABI = True\nclass version:\n"
            f"    cuda = {cuda!r}\n"
            "class backends:\n    class cudnn:\n        @staticmethod\n        def is_available():\n"
            "            return False\n"
            "class cuda:\n    @staticmethod\n    def get_arch_list():\n"
            f"        return {list(archs)!r}\n"
            "    @staticmethod\n    def is_available():\n"
            f"        return {available}\n" + count)


@functools.cache
def cuda_device_count() -> int:
    """Visible CUDA GPUs, 0 when torch is missing or a CPU build (imported only by tests that ask)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def has_nvidia_smi_gpu() -> bool:
    """Does the driver list a GPU (without importing torch)?"""
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


@functools.cache
def cuda_toolkit() -> Path | None:
    """A CUDA toolkit with nvcc and its headers (CUDA_HOME, else /usr/local/cuda), or None."""
    for cand in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if cand and (Path(cand) / "bin" / "nvcc").is_file() and (Path(cand) / "include" / "cuda_runtime.h").is_file():
            return Path(cand)
    return None


def _apply(marks: list[pytest.MarkDecorator]) -> Callable[[T], T]:
    def decorate(obj: T) -> T:
        for mark in reversed(marks):
            obj = mark(obj)  # type: ignore[assignment]  # a mark returns the object it decorates
        return obj

    return decorate


def gpu_marks(count: int = 1, why: str = "") -> list[pytest.MarkDecorator]:
    """The marks of a GPU test, for `pytestmark = gpu_marks()` (a whole module) or `@requires_gpu()`."""
    need = f"{count} CUDA GPUs" if count > 1 else "a CUDA GPU"
    return [pytest.mark.gpu,
            pytest.mark.skipif(cuda_device_count() < count, reason=f"needs {need}{': ' + why if why else ''}")]


def requires_gpu(count: int = 1, why: str = "") -> Callable[[T], T]:
    return _apply(gpu_marks(count, why))


def toolkit_marks() -> list[pytest.MarkDecorator]:
    """A real nvcc compile: slow (the second step of .ci/run), skipped where no toolkit is installed."""
    return [pytest.mark.slow,
            pytest.mark.skipif(cuda_toolkit() is None, reason="needs a CUDA toolkit (CUDA_HOME/bin/nvcc + headers)")]


requires_cuda_toolkit = _apply(toolkit_marks())


def run_cli(*args: str, stdin: bytes | str | None = None, timeout: float = 120,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`olmo-doctor ARGS` in a fresh process, as a user runs it: exit code, stdout and stderr exactly as printed."""
    data = stdin.decode() if isinstance(stdin, bytes) else stdin
    return subprocess.run([sys.executable, "-m", "olmo_doctor", *args], input=data, capture_output=True, text=True,
                          timeout=timeout, env=None if env is None else {**os.environ, **env})


def case_findings(rule: Any, case: Any) -> list[Any]:
    """The findings of `rule` that its own [[test]] case produces, rendered as `check` (or, for a build rule,
    `build-kernels`) shows them: through the rule engine, or through the build planner for scope build."""
    if rule.for_build:
        from olmo_doctor.build.plan import BuildRequest, plan_build
        from olmo_doctor.build.recipes import find_recipe

        req = dict(case.build)
        recipe = find_recipe(req.pop("package"))
        request = BuildRequest(package=recipe.package, jobs=req.pop("jobs", None),
                               archs=tuple(req.pop("archs", ())), subset=req.pop("subset", None))
        assert not req, f"{rule.code}: unknown build request keys {sorted(req)}"
        plan = plan_build(dict(case.facts), recipe, request)
        return [f for f in plan.blockers + plan.warnings if f.code == rule.code]
    from olmo_doctor.rules.engine import fires, to_finding

    fired, extra, bound = fires(rule, case.facts)
    return [to_finding(rule, bound, extra)] if fired else []


def updating_goldens() -> bool:
    return os.environ.get(UPDATE_GOLDENS_ENV, "") not in ("", "0")


def check_golden(path: Path, text: str) -> None:
    """Compare `text` with the golden file at `path`, or rewrite it when updating (`pytest --update-goldens`).
    A missing golden file fails: it is created only on purpose."""
    if updating_goldens():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        return
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.is_file():
        pytest.fail(f"no golden file {shown}; create it with: {REGENERATE}")
    want = path.read_text()
    if want != text:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "now"))
        pytest.fail(f"{shown} differs; if the change is intended, regenerate: {REGENERATE}\n{diff}")


def require_olmo_core() -> None:
    """Skip without ai2-olmo-core (the `olmo-core` extra), except under OLMO_REQUIRE_OLMO_CORE=1, which .ci/run sets
    after installing it: there a missing package fails the test instead of hiding it."""
    if os.environ.get("OLMO_REQUIRE_OLMO_CORE") == "1":
        import olmo_core  # noqa: F401
    else:
        pytest.importorskip("olmo_core", reason="ai2-olmo-core is not installed (pip install -e '.[olmo-core]')")


def report_facts(text: str) -> dict[str, Any]:
    """What `check --from-report` reads from a pasted text (derived facts included; UsageError: not a report)."""
    import tempfile

    from olmo_doctor.report import load_report

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "report.txt")
        path.write_text(text)
        return dict(load_report(path))
