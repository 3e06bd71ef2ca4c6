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
from olmo.fsutil import check_local

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
    held: list[int] = field(default_factory=list)  # the data folders, held for reading while the Source lives


def _hold_folders(source: Source, folders: list[Path]) -> None:
    """Hold every data folder for reading as long as `source` lives (olmo/lock.py): `prepare-data --overwrite`
    never replaces a folder a live run reads, and a run never starts on one being rewritten."""
    import weakref

    from olmo.lock import hold_for_reading

    for folder in dict.fromkeys(folders):
        fd = hold_for_reading(folder, "data path")
        if fd is not None:
            source.held.append(fd)
    weakref.finalize(source, _let_go_all, source.held)


def _let_go_all(fds: list[int]) -> None:
    from olmo.lock import let_go

    for fd in fds:
        let_go(fd)


def open_source(paths: list[str], cfg: DataConfig) -> Source:
    """Resolve shard dirs (with manifest.json), .npy files and globs into a list of shard files."""
    source = Source([], cfg.vocab_size, paths[0] if paths else "")
    for entry in paths:
        for m in _matches(entry):
            manifest = load_manifest(m) if m.is_dir() else None
            if manifest:
                _add_manifest(source, m, manifest, cfg)
            else:
                _add_headerless(source, m, cfg)
    if not source.files:
        raise ConfigError("data.paths is empty; point it at a directory made by `olmo prepare-data`")
    _hold_folders(source, [f.path.parent for f in source.files])
    return source


def _matches(entry: str) -> list[Path]:
    """The paths a data.paths entry names: itself, or what its glob matches (ConfigError for none)."""
    check_local(entry, "data path")
    matches = sorted(glob.glob(entry)) if any(c in entry for c in "*?[") else [entry]
    if not matches:
        raise ConfigError(f"data path {entry} matches no files")
    return [Path(m) for m in matches]


def _add_manifest(source: Source, folder: Path, manifest: dict[str, Any], cfg: DataConfig) -> None:
    """The shards of a prepare-data folder: their dtype, sizes, checksums and tokenizer come from its manifest."""
    sha = manifest["tokenizer"]["sha256"]
    if source.tokenizer_sha256 and sha != source.tokenizer_sha256:
        raise ConfigError(f"{folder} was tokenized with a different tokenizer than the other data paths")
    if cfg.dtype and cfg.dtype != manifest["dtype"]:
        raise ConfigError(f"data.dtype is {cfg.dtype} but {folder / 'manifest.json'} says the shards are "
                          f"{manifest['dtype']}; drop data.dtype (the manifest knows)")
    source.tokenizer_sha256, source.vocab_size = sha, manifest["vocab_size"]
    for s in manifest["shards"]:
        source.files.append(ShardFile(folder / s["file"], s["dtype"], s["num_tokens"]))
        source.checks.append(ShardToCheck(folder / s["file"], s["dtype"], s["num_tokens"], s["sha256"], s["max_id"]))


def _add_headerless(source: Source, path: Path, cfg: DataConfig) -> None:
    """.npy shards without a manifest (a folder of them, or one file): data.dtype and a vocab size must be given."""
    npys = _headerless_files(path)
    # headerless shards do not say how wide a token is: guessing uint16 for uint32 data reads every token as two,
    # so the width must be given
    if cfg.dtype is None or source.vocab_size is None:
        raise ConfigError(f"{path} has no manifest.json, so set data.dtype (uint16 or uint32, as the tool that "
                          "wrote the shards used) and data.vocab_size (its tokenizer's vocab)")
    if cfg.dtype not in ("uint16", "uint32"):
        raise ConfigError(f"data.dtype must be uint16 or uint32 for token shards (got {cfg.dtype})")
    size = np.dtype(cfg.dtype).itemsize
    source.files += [ShardFile(p, cfg.dtype, p.stat().st_size // size) for p in npys]
    source.checks += [ShardToCheck(p, cfg.dtype, None) for p in npys]


def _headerless_files(path: Path) -> list[Path]:
    if path.is_dir():
        npys = sorted(path.glob("*.npy"))
        if not npys:
            raise ConfigError(f"{path} holds no token shards (*.npy); run `olmo prepare-data` first")
        if any(path.glob("part-*.json")):
            raise ConfigError(f"{path} has no manifest.json: its prepare-data run did not finish; rerun it")
        return npys
    if path.is_file():
        return [path]
    raise ConfigError(f"data path {path} does not exist; run `olmo prepare-data` or fix data.paths")


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


class ShardLoader:
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
        position = state["batch_in_epoch"] * state["global_batch_size"] // self.global_batch
        if position > self.batches_per_epoch:  # past the epoch's end: not a position this data can have
            raise ConfigError(f"the checkpoint's data position (batch {state['batch_in_epoch']:,} of an epoch) lies "
                              f"past the {self.batches_per_epoch:,} batches an epoch of this data holds; the "
                              "checkpoint is damaged: use another one")
        self.batch_in_epoch = position
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
