"""A memory limit (ulimit -v) too small for training stops `olmo` with one line naming the doctor's OD270 and exit
2, wherever the process runs out of room: in the doctor gate (its probes' threads, the torch worker's import), at
an import past the gate ("failed to map segment from shared object", pytorch #16558, numpy #14148), in an
allocation (MemoryError), or behind an expected error a handler made of it (a MemoryError that a tokenizer's
`except Exception` turned into "not a tokenizer.json"). Never a traceback, never "this is a bug in olmo".

The real tests run `olmo train --smoke` in a child under `ulimit -v`, at limits measured on this machine: the
address space Python needs for olmo and its doctor, and what it needs with torch and tokenizers loaded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import olmo.cli.main
import olmo_doctor.live_faults
from olmo.errors import ConfigError

BASH = shutil.which("bash")
PEAK = ("import re, sys\n"
        "for m in sys.argv[1:]: __import__(m)\n"
        "print(re.search(r'VmPeak:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")


def _peak_kib(*modules: str) -> int:
    """The peak virtual memory (KiB) of a Python that imported these modules."""
    out = subprocess.run([sys.executable, "-c", PEAK, *modules], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _smoke_under(limit_kib: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    cmd = f'ulimit -v {limit_kib} && exec "$0" -m olmo train --smoke --steps 4'
    return subprocess.run([BASH or "bash", "-c", cmd, sys.executable], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)


def _named_the_limit(proc: subprocess.CompletedProcess[str], limit_kib: int) -> None:
    err = proc.stderr.strip()
    assert "Traceback" not in err and "bug in olmo" not in err, err
    assert proc.returncode == 2 and len(err.splitlines()) == 1, (proc.returncode, err)
    assert "OD270" in err and "ulimit -v" in err, err
    shown = re.search(r"ulimit -v (\d+(?:\.\d+)?) (MiB|GiB)", err)
    assert shown is not None, err
    mib = float(shown.group(1)) * (1024 if shown.group(2) == "GiB" else 1)
    assert abs(mib - limit_kib / 1024) <= max(1.0, 0.06 * mib), (mib, limit_kib)  # the limit that is set


needs_proc = pytest.mark.skipif(BASH is None or not Path("/proc/self/status").exists(),
                                reason="needs bash and /proc (ulimit -v and VmPeak)")


@needs_proc
def test_a_limit_too_small_for_the_doctor_and_torch_is_one_line(tmp_path: Path) -> None:
    """Room for Python and olmo, not for torch: the gate (its probes' threads or its torch worker) names OD270."""
    limit = _peak_kib("olmo.cli.main", "olmo_doctor.api") * 3
    _named_the_limit(_smoke_under(limit, tmp_path), limit)


CONSOLE_SCRIPT = "import sys; from olmo_doctor.olmo_clash import olmo_main; sys.argv[0] = 'olmo'; olmo_main()"


def _smoke_limited(entry: list[str], limit_kib: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`olmo train --smoke` started as `entry` says, under RLIMIT_AS set in the child before it runs."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, resource.RLIM_INFINITY))

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, *entry, "train", "--smoke", "--steps", "4"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=tmp_path, preexec_fn=limit)


@needs_proc
@pytest.mark.parametrize("entry", [["-c", CONSOLE_SCRIPT], ["-m", "olmo"]], ids=["olmo", "python -m olmo"])
@pytest.mark.parametrize("times", [1.0, pytest.param(1.2, marks=pytest.mark.slow),
                                   pytest.param(1.5, marks=pytest.mark.slow), 2.0])
def test_a_limit_that_fails_an_import_is_one_line(tmp_path: Path, entry: list[str], times: float) -> None:
    """Limits from what Python needs to import olmo's command line up to twice that: the process runs out of room
    while it imports (a library that cannot be mapped, a module that cannot be compiled), in the gate's threads,
    or in its own error path, before any of olmo's handlers or inside them; each is one line naming OD270 and
    the limit, exit 2, never a traceback or "this is a bug in olmo"."""
    limit = int(_peak_kib("olmo.cli.main") * times)
    _named_the_limit(_smoke_limited(entry, limit, tmp_path), limit)


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize("fraction", [0.35, 0.55, 0.75, 0.9, 1.0])
def test_every_limit_below_what_training_maps_is_one_line(tmp_path: Path, fraction: float) -> None:
    """Limits from a third of what Python with torch and tokenizers maps up to all of it: each run stops in
    another place (the torch worker, an import past the gate, an allocation), always with OD270 in one line, or
    trains (a limit the run happened to fit in is no fault)."""
    limit = int(_peak_kib("torch", "tokenizers", "olmo.cli.main", "olmo_doctor.api") * fraction)
    proc = _smoke_under(limit, tmp_path)
    if proc.returncode == 0 and fraction >= 0.9:
        return
    _named_the_limit(proc, limit)


def _raising(exc: BaseException) -> Callable[..., object]:
    def app(*args: object, **kwargs: object) -> object:
        raise exc
    return app


def _handled(inner: BaseException) -> ConfigError:
    """What `load_tokenizer` does with whatever tokenizers raises: an expected error, raised from None."""
    try:
        try:
            raise inner
        except Exception:
            raise ConfigError("olmo/assets/tokenizer.json is not a Hugging Face tokenizer.json ()") from None
    except ConfigError as e:
        return e


LIMITED = {"ulimit.as.soft": 1_126_400_000, "ulimit.data.soft": -1, "plan.device": None}
UNLIMITED = {"ulimit.as.soft": -1, "ulimit.data.soft": -1, "plan.device": None}


@pytest.mark.parametrize("exc", [
    MemoryError(),
    ImportError("/v/site-packages/tokenizers/tokenizers.abi3.so: failed to map segment from shared object"),
    RuntimeError("can't start new thread"),
    OSError(12, "Cannot allocate memory"),
    RuntimeError("std::bad_alloc"),
    _handled(MemoryError()),  # the tokenizer case: bad input said, memory meant
])
def test_a_memory_failure_under_a_limit_is_the_limit(cli: Callable[..., tuple[int, str, str]],
                                                     monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    monkeypatch.setattr(olmo_doctor.live_faults, "_live_facts", lambda: dict(LIMITED))
    monkeypatch.setattr(olmo.cli.main, "app", _raising(exc))
    code, _, err = cli("validate-shards", "data")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "OD270" in err and "ulimit -v 1.0 GiB" in err and "not a Hugging Face" not in err, err


def test_without_a_limit_the_same_errors_are_what_they_were(cli: Callable[..., tuple[int, str, str]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(olmo_doctor.live_faults, "_live_facts", lambda: dict(UNLIMITED))
    monkeypatch.setattr(olmo.cli.main, "app", _raising(_handled(MemoryError())))
    code, _, err = cli("validate-shards", "data")
    assert code == 2 and "not a Hugging Face tokenizer.json" in err and "OD270" not in err
    monkeypatch.setattr(olmo.cli.main, "app", _raising(MemoryError()))
    code, _, err = cli("validate-shards", "data")
    assert code == 1 and "bug in olmo" in err  # no limit: a MemoryError is not the machine's limit


@pytest.mark.parametrize("exc", [
    RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),  # the GPU's memory: the batch, not the limit
    ImportError("libfoo.so: cannot allocate memory in static TLS block"),  # glibc's TLS surplus, any limits
    KeyError("model.n_layers"),
])
def test_other_errors_under_a_limit_are_not_the_limit(exc: BaseException) -> None:
    assert olmo_doctor.live_faults.limit_fault(exc, dict(LIMITED)) is None


def test_a_line_already_naming_the_limit_is_not_named_again() -> None:
    """The gate's refusal (an OlmoError holding OD270's line) seen again by the CLI's handler stays one mention."""
    first = olmo_doctor.live_faults.limit_line(RuntimeError("can't start new thread"))
    if first is None:  # no limit on this process: make the line from facts, as the gate would under one
        found = olmo_doctor.live_faults.limit_fault(RuntimeError("can't start new thread"), dict(LIMITED))
        assert found is not None
        first = olmo_doctor.live_faults.fault_line("RuntimeError: can't start new thread", found)
    again = olmo_doctor.live_faults.limit_line(ConfigError(first))
    assert again == first and again.count("OD270") == 2  # the code and `explain OD270`, once each


def test_without_room_for_the_rules_the_limit_is_still_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules cannot be loaded (no room left to parse them): the limit set on the process is named anyway."""
    import resource

    def no_room(*_: object) -> None:
        raise MemoryError

    monkeypatch.setattr(olmo_doctor.live_faults, "limit_fault", no_room)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (3 << 30, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    line = olmo_doctor.live_faults.limit_line(ImportError("tokenizers.abi3.so: failed to map segment from shared "
                                                          "object"))
    assert line is not None and "OD270" in line and "ulimit -v 3.0 GiB" in line and "map segment" in line
    assert olmo_doctor.live_faults.limit_line(KeyError("model.n_layers")) is None
