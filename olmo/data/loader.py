"""Training data: memory-mapped token shards cut into fixed-length sequences, served in a seeded order.

Like OLMo-core's `NumpyFSLDataset` ("concatenate and chunk"), each shard is cut separately into `seq_len`
windows and its remainder is dropped, so shards written by `dolma tokens` read the same way here and there.
The loader shuffles window indices with a permutation that depends only on (seed, epoch), cuts each epoch into
global batches, and gives every rank a strided slice of each global batch: the global batch is the same for any
world size. Its `state_dict()` is a position in that order, so a resumed run sees exactly the next batch.
"""

from __future__ import annotations

import glob
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from olmo.config import ConfigError, DataConfig
from olmo.data.shard_check import ShardToCheck
from olmo.data.shards import load_manifest

VAL_SEED = 0x5EED  # the held-out split never depends on data.seed, so changing the seed cannot leak eval data


@dataclass
class ShardFile:
    path: Path
    dtype: str
    num_tokens: int


@dataclass
class Source:
    files: list[ShardFile]
    vocab_size: int | None  # of the tokenizer the shards were made with, when known
    where: str  # for messages: the first path
    tokenizer_sha256: str | None = None
    checks: list[ShardToCheck] = field(default_factory=list)  # what olmo/data/shard_check.py verifies before step 1


def open_source(paths: list[str], cfg: DataConfig) -> Source:
    """Resolve shard dirs (with manifest.json), .npy files and globs into a list of shard files."""
    files: list[ShardFile] = []
    checks: list[ShardToCheck] = []
    vocab: int | None = cfg.vocab_size
    sha: str | None = None
    for entry in paths:
        matches = sorted(glob.glob(entry)) if any(c in entry for c in "*?[") else [entry]
        if not matches:
            raise ConfigError(f"data path {entry} matches no files")
        for m in map(Path, matches):
            manifest = load_manifest(m) if m.is_dir() else None
            if manifest:
                if sha and manifest["tokenizer"]["sha256"] != sha:
                    raise ConfigError(f"{m} was tokenized with a different tokenizer than the other data paths")
                if cfg.dtype and cfg.dtype != manifest["dtype"]:
                    raise ConfigError(f"data.dtype is {cfg.dtype} but {m / 'manifest.json'} says the shards are "
                                      f"{manifest['dtype']}; drop data.dtype (the manifest knows)")
                sha, vocab = manifest["tokenizer"]["sha256"], manifest["vocab_size"]
                files += [ShardFile(m / s["file"], s["dtype"], s["num_tokens"]) for s in manifest["shards"]]
                checks += [ShardToCheck(m / s["file"], s["dtype"], s["num_tokens"], s["sha256"], s["max_id"])
                           for s in manifest["shards"]]
                continue
            if m.is_dir():
                npys = sorted(m.glob("*.npy"))
                if not npys:
                    raise ConfigError(f"{m} holds no token shards (*.npy); run `olmo prepare-data` first")
                if any(m.glob("part-*.json")):
                    raise ConfigError(f"{m} has no manifest.json: its prepare-data run did not finish; rerun it")
            elif m.is_file():
                npys = [m]
            else:
                raise ConfigError(f"data path {m} does not exist; run `olmo prepare-data` or fix data.paths")
            # headerless shards do not say how wide a token is: guessing uint16 for uint32 data reads every
            # token as two, so the width must be given
            if cfg.dtype is None or vocab is None:
                raise ConfigError(f"{m} has no manifest.json, so set data.dtype (uint16 or uint32, as the tool that "
                                  "wrote the shards used) and data.vocab_size (its tokenizer's vocab)")
            if cfg.dtype not in ("uint16", "uint32"):
                raise ConfigError(f"data.dtype must be uint16 or uint32 for token shards (got {cfg.dtype})")
            size = np.dtype(cfg.dtype).itemsize
            files += [ShardFile(p, cfg.dtype, p.stat().st_size // size) for p in npys]
            checks += [ShardToCheck(p, cfg.dtype, None) for p in npys]
    if not files:
        raise ConfigError("data.paths is empty; point it at a directory made by `olmo prepare-data`")
    return Source(files, vocab, paths[0], sha, checks)


class TokenWindows:
    """Window i of the dataset is `seq_len` consecutive tokens of one shard (remainders dropped)."""

    def __init__(self, source: Source, seq_len: int):
        self.seq_len = seq_len
        self.arrays = [np.memmap(f.path, dtype=f.dtype, mode="r", shape=(f.num_tokens,)) if f.num_tokens else None
                       for f in source.files]
        counts = np.array([f.num_tokens // seq_len for f in source.files], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        h = hashlib.sha256(f"fsl seq_len={seq_len}".encode())
        for f in source.files:  # as OLMo-core: file names and sizes, not contents (cheap, catches swapped data)
            h.update(f"{f.path.name}:{f.dtype}:{f.num_tokens};".encode())
        self.fingerprint = h.hexdigest()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def get(self, indices: np.ndarray) -> torch.Tensor:
        """Windows `indices` as an int64 tensor (len(indices), seq_len)."""
        out = np.empty((len(indices), self.seq_len), dtype=np.int64)
        for row, i in enumerate(indices):
            f = int(np.searchsorted(self.starts, i, side="right")) - 1
            off = (int(i) - int(self.starts[f])) * self.seq_len
            out[row] = self.arrays[f][off:off + self.seq_len]  # type: ignore[index]
        return torch.from_numpy(out)


def split_indices(n: int, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) window indices: a fixed-seed random `val_fraction` of the windows is held out."""
    if val_fraction <= 0:
        return np.arange(n), np.arange(0)
    is_val = np.random.default_rng(VAL_SEED).random(n) < val_fraction
    if n >= 2 and not is_val.any():
        is_val[n // 2] = True
    return np.flatnonzero(~is_val), np.flatnonzero(is_val)


class DataLoader:
    """Seeded epochs of global batches; each rank gets micro-batches from its strided slice of every batch."""

    def __init__(self, windows: TokenWindows, indices: np.ndarray, global_batch: int, micro_batch: int,
                 seed: int, rank: int = 0, world_size: int = 1):
        if len(indices) < global_batch:
            raise ConfigError(f"the training data has {len(indices):,} sequences of {windows.seq_len} tokens, fewer "
                              f"than one global batch ({global_batch}); lower global_batch_size or data.seq_len, "
                              "or add data")
        self.windows, self.indices = windows, indices
        self.global_batch, self.micro_batch = global_batch, micro_batch
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.batch_in_epoch = 0, 0
        self._order: np.ndarray | None = None

    @property
    def batches_per_epoch(self) -> int:
        return len(self.indices) // self.global_batch

    def _epoch_order(self) -> np.ndarray:
        if self._order is None:
            rng = np.random.default_rng([self.seed, self.epoch])
            self._order = self.indices[rng.permutation(len(self.indices))]
        return self._order

    def next_batch(self) -> list[torch.Tensor]:
        """This rank's micro-batches for the next optimizer step."""
        if self.batch_in_epoch >= self.batches_per_epoch:
            self.epoch, self.batch_in_epoch, self._order = self.epoch + 1, 0, None
        start = self.batch_in_epoch * self.global_batch
        batch = self._epoch_order()[start:start + self.global_batch][self.rank::self.world_size]
        self.batch_in_epoch += 1
        mb = self.micro_batch
        return [self.windows.get(batch[i:i + mb]) for i in range(0, len(batch), mb)]

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                "global_batch_size": self.global_batch, "seq_len": self.windows.seq_len,
                "fingerprint": self.windows.fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["fingerprint"] != self.windows.fingerprint or state["seq_len"] != self.windows.seq_len:
            raise ConfigError("the checkpoint was trained on different data (shard names/sizes or data.seq_len "
                              "changed); restore the original data.paths or start a new run_dir")
        self.seed, self.epoch = state["seed"], state["epoch"]
        # a changed global batch size keeps the position in sequences, as OLMo-core does with tokens
        self.batch_in_epoch = state["batch_in_epoch"] * state["global_batch_size"] // self.global_batch
        self._order = None


def eval_batches(windows: TokenWindows, indices: np.ndarray, micro_batch: int, max_batches: int,
                 rank: int = 0, world_size: int = 1) -> list[torch.Tensor]:
    """This rank's micro-batches of the eval set: the first `max_batches * micro_batch` held-out windows in a
    fixed order (the same every eval and for any world size), cut to a multiple of the world size and split by
    stride, so every rank runs the same number of forwards and the mean over all ranks is the same eval."""
    chosen = indices[: max_batches * micro_batch]
    chosen = chosen[: len(chosen) - len(chosen) % world_size]
    mine = chosen[rank::world_size]
    return [windows.get(mine[i:i + micro_batch]) for i in range(0, len(mine), micro_batch)]
