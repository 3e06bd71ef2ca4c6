"""Checkpoints: atomic save, the `latest` pointer, keep_last_n, and a real SIGKILL in the middle of saving."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from olmo import checkpoint, rng_states
from olmo.errors import OlmoError

# A helper process imports torch once, then on each "go" forks a saver that does nothing but save checkpoints
# in a loop (so a kill at a random moment lands mid-save) and reports "ready PID" after its first save. The test
# SIGKILLs that PID itself. Forking keeps each round at a fraction of a second instead of a torch import.
# Every tensor in checkpoint N holds the value N, so a reader can tell a whole checkpoint from a mixed one.
SAVER = """
import os, sys, torch
import torch._dynamo  # imported by the first optimizer step: pay for it once, before forking
import torch.distributed.checkpoint, torch.distributed.checkpoint.state_dict  # likewise for the first save
from pathlib import Path
from olmo import checkpoint
torch.set_num_threads(1)  # no OpenMP worker threads in a process that forks

def save_forever(run, helper_pid):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 1024)).sum().backward()
    opt.step()
    last = checkpoint.latest(run)
    step = int(last.name.removeprefix("step")) if last else 0
    while os.getppid() == helper_pid:  # never outlive the helper
        step += 1
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(step)
        checkpoint.save(run, step, model, opt, {"tokens_seen": step}, keep_last_n=2)
        yield step

run = Path(sys.argv[1])
helper = os.getpid()
for cmd in sys.stdin:
    if cmd.strip() != "go":
        break
    pid = os.fork()
    if pid == 0:
        for i, _ in enumerate(save_forever(run, helper)):
            if i == 0:
                print("ready", os.getpid(), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print("reaped", flush=True)
"""


def _check_latest(run: Path) -> int:
    """`latest` names a checkpoint that verifies and loads, whose contents are all from its own step."""
    pointer = (run / "checkpoints" / "latest").read_text().strip()
    path = run / "checkpoints" / pointer
    assert checkpoint.latest(run) == path
    assert checkpoint.verify(path) is None
    step = int(pointer.removeprefix("step"))
    state = checkpoint.read_state(path)
    assert state["step"] == step and state["tokens_seen"] == step
    weights = checkpoint.load_model_state(path)
    assert len(weights) == 4 and all(bool((t == step).all()) for t in weights.values())
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))
    opt = torch.optim.AdamW(model.parameters())
    checkpoint.load(path, model, opt)  # weights and AdamW state load back into a fresh model
    assert all(bool((t == step).all()) for t in model.state_dict().values())
    assert len(opt.state_dict()["state"]) == 4
    return step


@pytest.mark.slow
def test_sigkill_during_save_never_breaks_latest(tmp_path: Path) -> None:
    rng = random.Random(0)
    mid_save, last_step = 0, 0
    helper = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert helper.stdin is not None and helper.stdout is not None
    pid = "0"
    try:
        for _ in range(12):
            helper.stdin.write("go\n")
            helper.stdin.flush()
            ready, pid = helper.stdout.readline().split()  # its first save is complete: it is saving again
            assert ready == "ready"
            time.sleep(rng.uniform(0.0, 0.15))
            os.kill(int(pid), signal.SIGKILL)
            assert helper.stdout.readline().strip() == "reaped"
            leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir()
                         if p.name.endswith(("-tmp", "-deleting"))]
            mid_save += bool(leftovers)
            step = _check_latest(tmp_path)
            assert step > last_step  # every saver made progress and the pointer moved forward
            last_step = step
            assert len(checkpoint.complete_checkpoints(tmp_path)) <= 3  # keep 2, +1 while a purge is cut short
    finally:
        helper.kill()
        helper.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    assert mid_save >= 4, mid_save  # the kills really did land inside saves (a -tmp or -deleting dir was left)


def _tiny() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(4, 4)
    return model, torch.optim.AdamW(model.parameters())


def test_keep_last_n_and_leftover_cleanup(tmp_path: Path) -> None:
    model, opt = _tiny()
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        checkpoint.save(tmp_path, step, model, opt, {}, keep_last_n=2)
    assert [p.name for p in checkpoint.complete_checkpoints(tmp_path)] == ["step2", "step3"]
    (root / "step4-tmp").mkdir()  # a killed save
    (root / "step1-deleting").mkdir()  # a killed purge
    (root / "step5-tmp").mkdir()
    assert checkpoint.latest(tmp_path) == root / "step3"  # unfinished dirs are never candidates
    checkpoint.save(tmp_path, 4, model, opt, {}, keep_last_n=0)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step2", "step3", "step4"]


def test_damaged_checkpoint_is_refused(tmp_path: Path) -> None:
    model, opt = _tiny()
    path = checkpoint.save(tmp_path, 7, model, opt, {"x": 1})
    with open(path / "__0_0.distcp", "ab") as f:
        f.write(b"junk")
    assert "__0_0.distcp has" in (checkpoint.verify(path) or "")
    try:
        checkpoint.load(path, model, opt)
    except OlmoError as e:
        assert "is damaged" in str(e)
    else:
        raise AssertionError("a damaged checkpoint loaded")


def test_rng_state_round_trips() -> None:
    import numpy as np

    state = rng_states.capture()
    a = (torch.rand(3), np.random.rand(3), random.random())
    rng_states.apply(state)
    b = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
