"""Advisory locks: a folder held by a live process is refused with its pid and start time; one left by a killed
process is taken over; a released lock leaves no file; and two prepare-data runs into one output cannot both
write (the second is refused, the first's shards and metadata stay its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.data.corpus import CORPUS_PATH
from olmo.errors import OlmoError
from olmo.lock import LOCK_NAME, DirLock

HOLDER = """
import sys, time
from pathlib import Path
from olmo.lock import DirLock
DirLock(Path(sys.argv[1]), "run_dir").acquire()
print("held", flush=True)
time.sleep(60)
"""


def _holder(d: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(d)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_live_holder_is_named_and_a_dead_ones_lock_is_taken_over(tmp_path: Path) -> None:
    p = _holder(tmp_path)
    try:
        with pytest.raises(OlmoError, match=rf"run_dir {tmp_path} is in use by pid {p.pid} \(started 20\d\d-"):
            DirLock(tmp_path, "run_dir").acquire()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert (tmp_path / LOCK_NAME).exists()  # a kill -9 leaves the file behind ...
    lock = DirLock(tmp_path, "run_dir").acquire()  # ... and the next run takes it over
    assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_NAME).read_text()
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def test_garbage_in_a_lock_file_is_data_not_a_message(tmp_path: Path) -> None:
    import fcntl

    (tmp_path / LOCK_NAME).write_text('{"pid": "1; rm -rf /", "started": "\\n\\u001b[31mred"}')
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(OlmoError) as e:
            DirLock(tmp_path, "--output").acquire()
    finally:
        os.close(fd)
    assert "in use by another process" in str(e.value) and "rm -rf" not in str(e.value)


def test_second_prepare_into_one_output_is_refused(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    """The first run is held mid-way (its lock taken, as a running prepare holds it) by a helper process; the
    second, a different job, must be refused without touching the folder."""
    out = tmp_path / "out"
    out.mkdir()
    p = _holder(out)
    try:
        before = sorted(os.listdir(out))
        # refused at once, never waiting for the holder (which sleeps a minute): the lock is taken non-blocking
        code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(out), "-t", "bundled")
        assert code == 2 and f"is in use by pid {p.pid}" in err and len(err.strip().splitlines()) == 1
        assert sorted(os.listdir(out)) == before
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(out), "-t", "bundled")
    assert code == 0, err
    assert not (out / LOCK_NAME).exists() and (out / "manifest.json").is_file()


def test_train_on_a_run_dir_in_use_is_refused_before_the_doctor(tmp_path: Path, tiny_data: Path,
                                                                 micro: Callable[..., object],
                                                                 cli: Callable[..., tuple[int, str, str]],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo.cli.gate
    import olmo.cli.main
    from olmo.recipe import to_yaml

    def no_doctor(*a: object) -> None:
        raise AssertionError("the doctor ran before the lock was checked")

    monkeypatch.setattr(olmo.cli.gate, "doctor_gate", no_doctor)
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "r.yaml").write_text(to_yaml(micro(tiny_data, run)))  # type: ignore[arg-type]
    p = _holder(run)
    try:
        for extra in ([], ["--resume"]):
            code, _, err = cli("train", str(tmp_path / "r.yaml"), "--device", "cpu", *extra)
            assert code == 2 and f"run_dir {run} is in use by pid {p.pid}" in err, err
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert sorted(os.listdir(run)) == [LOCK_NAME]


def test_a_run_that_fails_in_setup_leaves_no_run_dir(tmp_path: Path, tiny_data: Path, micro: Callable[..., object],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import olmo.train
    from olmo.errors import ConfigError

    def fail(*a: object) -> None:
        assert (tmp_path / "a" / "b" / "run" / LOCK_NAME).is_file()  # held while setting up
        raise ConfigError("no")

    monkeypatch.setattr(olmo.train, "setup", fail)
    with pytest.raises(ConfigError):
        olmo.train.train(micro(tiny_data, tmp_path / "a" / "b" / "run"))  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == []
