"""Crafted checkpoints for the attack tests: a real run's checkpoint with a pickle payload put where torch's stock
DCP loader would unpickle it. The payload writes a marker file when unpickled, so a test can tell whether it ran.

The crafting side is the attacker's (and the test's): it may unpickle its own freshly written files freely.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
import yaml

from olmo.config import DataConfig, ModelConfig, OptimConfig, TrainConfig


class Payload:
    """Unpickling this runs `exec`, which writes `marker`: what any code in a crafted checkpoint could do."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def payload_archive(marker: Path) -> bytes:
    """A torch.save archive (the format of every DCP item) whose data.pkl runs the payload."""
    buf = io.BytesIO()
    torch.save(Payload(marker), buf)
    return buf.getvalue()


def refresh_sizes(ck: Path) -> None:
    """Re-record the file sizes in train_state.json (when there is one), as the attacker would."""
    state_file = ck / "train_state.json"
    if state_file.is_file():
        state = json.loads(state_file.read_text())
        state["files"] = {p.name: p.stat().st_size for p in sorted(ck.iterdir())
                          if p.is_file() and p.name != "train_state.json"}
        state_file.write_text(json.dumps(state))


def resave(ck: Path, mutate: Callable[[dict[str, Any]], None], dcp_dir: Path | None = None) -> None:
    """Read the whole DCP checkpoint (trusted: ours), let `mutate` change the nested state dict (a Payload
    anywhere becomes a pickled bytes item), and write it back in place with DCP's own writer."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    where = dcp_dir or ck
    whole = where.parent / f".{where.name}.whole.pt"
    dcp_to_torch_save(where, whole)
    sd = torch.load(whole, weights_only=False)
    whole.unlink()
    mutate(sd)
    for p in where.glob("*.distcp"):
        p.unlink()
    (where / ".metadata").unlink()
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(where), no_dist=True)
    refresh_sizes(ck)


def put(sd: dict[str, Any], dotted: str, value: Any) -> None:
    """Set the entry DCP calls `dotted` ("optim.param_groups.embeddings.weight.lr",
    "model.blocks.0.attention.w_q.weight": a dict key may itself hold dots, as a model's parameter names do)."""
    parts = dotted.split(".")
    node: Any = sd
    while True:
        if isinstance(node, dict) and ".".join(parts) in node:
            node[".".join(parts)] = value
            return
        if isinstance(node, list) and len(parts) == 1:
            node[int(parts[0])] = value
            return
        head, parts = parts[0], parts[1:]
        node = node[int(head)] if isinstance(node, list) else node[head]


def splice(ck: Path, fqn: str, blob: bytes, dcp_dir: Path | None = None) -> None:
    """Replace the stored bytes of item `fqn` in the data files with `blob`, keeping the index's kind for it
    (a tensor stays a tensor in `.metadata`), and rewrite offsets and the index."""
    where = dcp_dir or ck
    with open(where / ".metadata", "rb") as f:
        meta = pickle.load(f)  # the attacker reading the checkpoint it is about to poison
    files: dict[str, bytes] = {}
    by_file: dict[str, list[Any]] = {}
    for index, info in meta.storage_data.items():
        by_file.setdefault(info.relative_path, []).append((index, info))
    hit = False
    for name, items in by_file.items():
        old = (where / name).read_bytes()
        out = bytearray()
        for index, info in sorted(items, key=lambda x: x[1].offset):
            data = old[info.offset:info.offset + info.length]
            if index.fqn == fqn:
                data, hit = blob, True
            info.offset, info.length = len(out), len(data)
            out += data
        files[name] = bytes(out)
    assert hit, f"{fqn} is not in the checkpoint"
    for name, data in files.items():
        (where / name).write_bytes(data)
    with open(where / ".metadata", "wb") as f:
        pickle.dump(meta, f)
    refresh_sizes(ck)


def point_item_at(ck: Path, fqn: str, relative_path: str, length: int) -> None:
    """Make the index send item `fqn` to another file (one outside the checkpoint, say)."""
    with open(ck / ".metadata", "rb") as f:
        meta = pickle.load(f)
    for index, info in meta.storage_data.items():
        if index.fqn == fqn:
            info.relative_path, info.offset, info.length = relative_path, 0, length
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(meta, f)
    refresh_sizes(ck)


def victim_config(data: Path, run_dir: Path, steps: int) -> TrainConfig:
    return TrainConfig(
        model=ModelConfig(d_model=64, n_layers=2, n_heads=4, mlp_hidden=128, vocab_size=768, max_seq_len=128),
        data=DataConfig(paths=[str(data)], seq_len=64, val_fraction=0.05),
        optim=OptimConfig(lr=3e-3, warmup_steps=2),
        run_dir=str(run_dir), steps=steps, global_batch_size=4, micro_batch_size=4, device="cpu",
        log_interval=1, eval_interval=100, eval_batches=1, save_interval=2, keep_last_n=1,
    )


@dataclasses.dataclass
class Victim:
    data: Path
    run: Path  # run_dir with checkpoints/step2

    def recipe(self, tmp: Path, run_dir: Path, steps: int = 4, **changes: object) -> Path:
        """A recipe file training the victim's model on its data into `run_dir`."""
        cfg = dataclasses.asdict(victim_config(self.data, run_dir, steps))
        cfg.update(changes)
        path = tmp / f"recipe-{run_dir.name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def copy(self, dst: Path) -> Path:
        shutil.copytree(self.run, dst, symlinks=True)
        return dst
