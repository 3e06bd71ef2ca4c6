"""The random-number generators' states a checkpoint keeps (torch, the current CUDA device, numpy, Python), per
rank, as JSON-able values in train_state.json (`rng` is rank 0's, `rng_ranks` every rank's), and putting them back.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from olmo.errors import OlmoError


def capture() -> dict[str, Any]:
    """Every RNG a training step may draw from, as JSON-able values. CUDA: the current device's generator only,
    and only once CUDA is in use: asking for every device's state would open a CUDA context on every GPU from
    every torchrun rank (hundreds of MB each, on GPUs other ranks train on)."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    return {
        "torch": torch.get_rng_state().tolist(),
        "cuda": [torch.cuda.get_rng_state().tolist()] if cuda else [],
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],  # type: ignore[index]
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }


def apply(state: dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if len(state.get("cuda") or []) == 1 and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.tensor(state["cuda"][0], dtype=torch.uint8))  # the current device's
    n = state["numpy"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
    p = state["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))


def gather() -> list[dict[str, Any]]:
    """Every rank's states, rank order (collective under torchrun)."""
    if not dist.is_initialized():
        return [capture()]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, capture())
    return states


def restore(state: dict[str, Any], rank: int, world_size: int) -> bool:
    """Put this rank's RNG states back when the checkpoint was saved at the same world size (as OLMo-core does;
    at another size there is no rank to take them from). Training draws no random numbers after the model is
    initialised (no dropout; the data order is seeded separately), so this only matters for exact replay."""
    ranks = state.get("rng_ranks") or [state.get("rng")]
    if not isinstance(ranks, list) or len(ranks) != world_size or not isinstance(ranks[rank], dict):
        return False
    try:
        apply(ranks[rank])
    except (KeyError, TypeError, ValueError, IndexError, RuntimeError, OverflowError):
        raise OlmoError("the checkpoint's RNG states in train_state.json are damaged; use another "
                        "checkpoint") from None
    return True
