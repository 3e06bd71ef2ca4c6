"""Atomic checkpoints with exact resume.

Layout (`run_dir/checkpoints/`):

    step-000100/            model.pt  optim.pt  train_state.json
    step-000200/            ...
    latest                  a one-line text file naming the newest complete checkpoint ("step-000200")

A save writes everything into `step-000200-tmp/`, fsyncs each file and the directory, renames the directory to
`step-000200`, fsyncs the parent, and only then replaces `latest` (temp file + rename). A SIGKILL at any moment
therefore leaves `latest` naming a complete checkpoint: the new one or the previous one. Old checkpoints beyond
`keep_last_n` are renamed aside before deletion, so a half-deleted one is never mistaken for a real one.

`train_state.json` holds what a resume needs besides the weights: the step, tokens seen, the data loader's
position, the torch / CUDA / numpy / python RNG states, the config, and an ISO-8601 timestamp.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from olmo.fsutil import atomic_write_bytes, fsync_dir, fsync_file, remove_tree

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MODEL, OPTIM, TRAIN_STATE = "model.pt", "optim.pt", "train_state.json"
STEP_RE = re.compile(r"^step-(\d+)$")


def step_dir_name(step: int) -> str:
    return f"step-{step:06d}"


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from, as JSON-able values."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    return {
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],  # type: ignore[index]
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if state.get("cuda") and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])
    n = state["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
    p = state["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))


def _save_torch(obj: Any, path: Path) -> None:
    torch.save(obj, path)
    fsync_file(path)


def save(run_dir: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         train_state: dict[str, Any], keep_last_n: int = 0) -> Path:
    """Write checkpoint `step` atomically, point `latest` at it, then drop the oldest beyond `keep_last_n`."""
    root = run_dir / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    tmp = root / f"{final.name}-tmp"
    _remove_leftovers(root)
    tmp.mkdir()
    _save_torch(model.state_dict(), tmp / MODEL)
    _save_torch(optimizer.state_dict(), tmp / OPTIM)
    state = dict(train_state, step=step, rng=rng_state(),
                 saved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 files={name: (tmp / name).stat().st_size for name in (MODEL, OPTIM)})
    atomic_write_bytes(tmp / TRAIN_STATE, json.dumps(state).encode())
    fsync_dir(tmp)
    if final.exists():  # the same step saved again (e.g. a rerun after resuming from an older checkpoint)
        remove_tree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    atomic_write_bytes(root / LATEST, (final.name + "\n").encode())
    if keep_last_n > 0:
        for old in complete_checkpoints(run_dir)[:-keep_last_n]:
            if old != final:
                remove_tree(old)
    return final


def _remove_leftovers(root: Path) -> None:
    """Delete what a killed save or purge leaves behind: `-tmp` and `-deleting` dirs, temp pointer files.
    Only one process saves into a run_dir at a time, so anything unfinished here is dead."""
    for p in root.iterdir():
        if p.is_dir() and (p.name.endswith("-tmp") or p.name.endswith("-deleting")):
            shutil.rmtree(p)
        elif p.name.startswith(f".{LATEST}.tmp"):
            p.unlink()


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Finished checkpoint dirs, oldest first (a dir is finished once renamed from -tmp; the rename is atomic)."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and STEP_RE.match(p.name) and (p / TRAIN_STATE).is_file()]
    return sorted(found, key=lambda p: int(STEP_RE.match(p.name).group(1)))  # type: ignore[union-attr]


def latest(run_dir: Path) -> Path | None:
    """The checkpoint `latest` names; if that file is missing or stale, the newest complete checkpoint."""
    pointer = run_dir / CHECKPOINTS / LATEST
    if pointer.is_file():
        target = run_dir / CHECKPOINTS / pointer.read_text().strip()
        if STEP_RE.match(target.name) and (target / TRAIN_STATE).is_file():
            return target
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def read_state(path: Path) -> dict[str, Any]:
    """The checkpoint's train_state.json (no tensors loaded)."""
    state: dict[str, Any] = json.loads((path / TRAIN_STATE).read_text())
    return state


def verify(path: Path) -> str | None:
    """None if the checkpoint at `path` is whole (state parses, files have their recorded sizes), else why not."""
    try:
        state = json.loads((path / TRAIN_STATE).read_text())
    except (OSError, json.JSONDecodeError) as e:
        return f"{TRAIN_STATE}: {e}"
    for name, size in state.get("files", {}).items():
        actual = (path / name).stat().st_size if (path / name).is_file() else -1
        if actual != size:
            return f"{name} has {actual} bytes, expected {size}"
    return None


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
         device: torch.device) -> dict[str, Any]:
    """Restore weights (and optimizer state) from `path`; returns train_state (RNGs are restored by the caller
    with `set_rng_state` once everything else that draws random numbers is built)."""
    problem = verify(path)
    if problem:
        raise RuntimeError(f"checkpoint {path} is damaged: {problem}")
    t0 = time.perf_counter()
    model.load_state_dict(torch.load(path / MODEL, map_location=device, weights_only=True))
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(path / OPTIM, map_location=device, weights_only=True))
    state: dict[str, Any] = json.loads((path / TRAIN_STATE).read_text())
    state["load_seconds"] = time.perf_counter() - t0
    return state
