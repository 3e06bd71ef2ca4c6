"""Atomic, resharding checkpoints with exact resume, through torch.distributed.checkpoint (DCP).

Layout (`run_dir/checkpoints/`):

    step100/                .metadata  __0_0.distcp  __1_0.distcp ...  train_state.json
    step200/                ...
    latest                  a one-line text file naming the newest complete checkpoint ("step200")

`step<N>` is OLMo-core's naming, and DCP's `.metadata` at the top is what its `Checkpointer.dir_is_checkpoint`
takes for a weights (and optimizer) checkpoint, so OLMo-core's tools find and load ours; older `step-NNNNNN`
folders are still read. OLMo-core's own checkpoints (`step<N>/model_and_optim/`) are read too, weights only
(olmo/interop/olmo_core.py): `resolve`, `verify`, `read_state`, `load` and `load_model_state` take either.

Weights and AdamW state are one DCP checkpoint (keys `model.<param name>` and `optim.state.<param name>...`, as
OLMo-core's): every rank writes its own shards (`__<rank>_0.distcp`) and rank 0 the `.metadata` that maps each
tensor's pieces to files. DCP reshards on load, so a checkpoint saved by N processes loads into M processes, FSDP2 or
DDP or a single process (`load_model_state` reads the whole model with no process group at all).

Atomic, for one process or many: rank 0 clears leftovers and makes `step200-tmp/`, a barrier, every rank
writes and fsyncs its files there (DCP's sync_files), DCP's closing collective waits until `.metadata` is
written, then rank 0 writes train_state.json, fsyncs the directory, renames it to `step200`, fsyncs the
parent, and only then replaces `latest` (temp file + rename); a last barrier keeps any rank from running ahead
of the rename. A SIGKILL at any moment leaves `latest` naming a complete checkpoint: the new or the previous
one. Old checkpoints beyond `keep_last_n` are renamed aside before deletion. With several nodes, run_dir must
be on a filesystem they all share (preflight.py checks this at start-up).

`train_state.json` holds what a resume needs besides tensors: the step, tokens seen, the data loader's position
(global, the same on every rank), the config, the world size, every rank's torch / CUDA / numpy / python RNG
states (`rng` is rank 0's, `rng_ranks` all of them) and an ISO-8601 timestamp.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from olmo import checkpoint_reader, rng_states
from olmo.checkpoint_leftovers import LATEST, remove_leftovers
from olmo.errors import OlmoError, is_disk_full
from olmo.fsutil import atomic_write_bytes, fsync_dir, gigabytes, mount_of, read_small, remove_tree
from olmo.interop import olmo_core as core
from olmo_common.bounded.data import load_json, shown

CHECKPOINTS = "checkpoints"
TRAIN_STATE, METADATA = "train_state.json", ".metadata"
MODEL, OPTIM = "model", "optim"  # top-level keys in the DCP state dict
STEP_RE = re.compile(r"^step-?(\d+)$")  # step<N> (OLMo-core's naming), or step-NNNNNN from older olmo versions


def step_dir_name(step: int) -> str:
    return f"step{step}"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 flat: bool = True) -> dict[str, Any]:
    """{model: ..., optim: ...} keyed by parameter names (sharded DTensors under FSDP2, plain tensors otherwise).

    The optimizer state is flattened (`optim.state.<param>.exp_avg`, `optim.param_groups.<param>.lr`), as
    OLMo-core's TransformerTrainModule saves and loads it by default: keyed by parameter rather than by group
    index, it loads into an optimizer whose groups are split differently (OLMo-core's one default group, or its
    embedding override first). `flat=False` reads checkpoints of older olmo versions (`param_groups.0.*`)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    sd: dict[str, Any] = {MODEL: get_model_state_dict(model)}
    if optimizer is not None:
        options = StateDictOptions(flatten_optimizer_state_dict=flat)
        sd[OPTIM] = get_optimizer_state_dict(model, optimizer, options=options)
    return sd


def _is_flat(meta: Any) -> bool:
    """Whether a checkpoint's optimizer state is flattened (ours from now on, OLMo-core's default)."""
    return f"{OPTIM}.param_groups.0.params" not in meta.state_dict_metadata


def _hyperparameters_missing(optim_sd: dict[str, Any], saved: Any) -> list[tuple[dict[str, Any], str, Any]]:
    """Take out of `optim_sd` the parameter-group settings the checkpoint does not hold (a key this torch's
    AdamW or `initial_lr` added since it was saved): DCP would refuse the whole load for one of them. Returns
    (where, key, our value) to put back, so those settings stay this run's."""
    def absent(key: str) -> bool:
        return f"{OPTIM}.{key}" not in saved

    taken: list[tuple[dict[str, Any], str, Any]] = []
    groups = optim_sd.get("param_groups")
    if isinstance(groups, list):  # the older nested layout: param_groups.<index>.<key>
        for i, group in enumerate(groups):
            gone = [k for k in group if k != "params" and absent(f"param_groups.{i}.{k}")]
            taken += [(group, k, group.pop(k)) for k in gone]
    else:
        taken += [(optim_sd, k, optim_sd.pop(k)) for k in list(optim_sd) if k.startswith("param_groups.") and absent(k)]
    return taken


@contextlib.contextmanager
def _single_process_ok() -> Iterator[None]:
    """DCP warns "assuming the intent is to save/load in a single process" without a process group: it is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*in a single process.*")
        yield


def save(run_dir: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         train_state: dict[str, Any], keep_last_n: int = 0, extra: dict[str, bytes] | None = None) -> Path:
    """Write checkpoint `step` atomically, point `latest` at it, then drop the oldest beyond `keep_last_n`.
    Collective under torchrun: every rank calls it; rank 0 does the directory work and writes `extra` (the
    tokenizer files that travel with the run) beside the tensors. On any failure the partial checkpoint is
    removed; a full disk is an OlmoError naming the device and the space needed."""
    root = run_dir / CHECKPOINTS
    final = root / step_dir_name(step)
    tmp = root / f"{final.name}-tmp"
    main = _rank() == 0
    if main:
        root.mkdir(parents=True, exist_ok=True)
        remove_leftovers(root)
        tmp.mkdir()
    _barrier()  # OLMo-core: after clearing a directory, a barrier, so no rank writes into it before it is fresh
    sd = _state_dicts(model, optimizer)
    try:
        _write(root, tmp, final, step, sd, train_state, keep_last_n, run_dir, main, extra)
    except BaseException as e:
        if main and tmp.exists():  # no half checkpoint stays; `latest` still names the previous one
            shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e):
            raise _no_space(root, run_dir, sd) from None
        raise
    _barrier()
    return final


def _no_space(root: Path, run_dir: Path, sd: dict[str, Any]) -> OlmoError:
    """The one-line "disk full" error: the space one checkpoint takes (the last one's files, else the tensors
    about to be written) and the checkpoint a resume would use."""
    prev = latest(run_dir)
    needed = 0
    if prev is not None:
        needed = sum(p.stat().st_size for p in prev.iterdir() if p.is_file())
    if not needed:
        needed = sum(t.numel() * t.element_size() for t in tensors(sd))
    resume = f"--resume continues from {prev.name}" if prev else "no earlier checkpoint exists"
    return OlmoError(f"no space left on {mount_of(root)} (needs about {gigabytes(needed)}) while saving a "
                     f"checkpoint to {root}; the partial checkpoint was removed and earlier ones are kept; free "
                     f"space and {resume}")


def tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from tensors(v)


def _write(root: Path, tmp: Path, final: Path, step: int, sd: dict[str, Any], train_state: dict[str, Any],
           keep_last_n: int, run_dir: Path, main: bool, extra: dict[str, bytes] | None) -> None:
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(tmp, sync_files=True)
    with _single_process_ok():
        dcp.save(sd, storage_writer=writer, no_dist=not dist.is_initialized())
    rngs = rng_states.gather()
    if main:
        for name, data in {**(extra or {}), core.METADATA_JSON: core.metadata_json()}.items():
            atomic_write_bytes(tmp / name, data)
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        state = dict(train_state, step=step, rng=rngs[0], rng_ranks=rngs,
                     saved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), files=files)
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
        try:  # a pointer that is a FIFO, a device or huge is ignored like a stale one
            name = read_small(pointer, "checkpoint pointer")[:64].decode("utf-8", "replace").strip()
        except OSError:
            name = ""
        if STEP_RE.match(name) and (run_dir / CHECKPOINTS / name / TRAIN_STATE).is_file():
            return run_dir / CHECKPOINTS / name
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def is_olmo_core(path: Path) -> bool:
    """An OLMo-core checkpoint (model_and_optim/ with DCP metadata, no train_state.json of ours)."""
    return not (path / TRAIN_STATE).is_file() and core.is_checkpoint(path)


def _parse_state(path: Path) -> dict[str, Any] | str:
    """train_state.json as a dict (for an OLMo-core checkpoint, what its config.json says), or why it cannot be
    one (the file is data: anything may be in it)."""
    if is_olmo_core(path):
        try:
            return core.train_state(path)
        except ValueError as e:  # its config.json is unreadable or holds another model
            return str(e)
    try:
        state = load_json(path / TRAIN_STATE, "train state")
    except OSError as e:
        return f"{TRAIN_STATE} cannot be read ({e.strerror})"
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply to parse
        return f"{TRAIN_STATE} is not valid JSON"
    if not isinstance(state, dict):
        return f"{TRAIN_STATE} is not a JSON object"
    files = state.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(n, str) and isinstance(v, int) for n, v in files.items()):
        return f"{TRAIN_STATE} has a malformed 'files' list"
    return state


def read_state(path: Path) -> dict[str, Any]:
    """The checkpoint's train_state.json (no tensors loaded); OlmoError when it is damaged."""
    state = _parse_state(path)
    if isinstance(state, str):
        raise OlmoError(f"checkpoint {path} is damaged: {state}; use another checkpoint")
    return state


def saved_config(path: Path, state: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run config a checkpoint was saved with (config.model at least); OlmoError when it is not there."""
    state = read_state(path) if state is None else state
    config = state.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        raise OlmoError(f"checkpoint {path} is damaged: {TRAIN_STATE} has no config.model section; use another "
                        "checkpoint")
    return config


def verify(path: Path) -> str | None:
    """None if the checkpoint at `path` is whole (state parses, DCP metadata is there, files have their recorded
    sizes), else why not."""
    if is_olmo_core(path):
        return None  # OLMo-core's: model_and_optim/.metadata is there (is_checkpoint); it records no file sizes
    state = _parse_state(path)
    if isinstance(state, str):
        return state
    if not (path / METADATA).is_file():
        return f"{METADATA} is missing (not a torch.distributed.checkpoint directory)"
    for name, size in state.get("files", {}).items():
        if "/" in name or name in ("", ".", ".."):
            return f"{TRAIN_STATE} lists a file outside the checkpoint ({shown(name)})"
        actual = (path / name).stat().st_size if (path / name).is_file() else -1
        if actual != size:
            return f"{name} has {actual} bytes, expected {size} (truncated or replaced)"
    return None


def require_whole(path: Path) -> None:
    """OlmoError naming what is wrong when the checkpoint at `path` is damaged."""
    problem = verify(path)
    if problem:
        raise OlmoError(f"checkpoint {path} is damaged: {problem}; use another checkpoint")
    _read_metadata(path)


def _dcp_load(state_dict: dict[str, Any], where: Path, path: Path | None = None) -> None:
    """Fill `state_dict` from the DCP folder `where` through the one safe loader (olmo/checkpoint_reader.py):
    tensors and plain values only, each key checked against the index for kind, shape and dtype first."""
    checkpoint_reader.load(state_dict, where, path)


def _read_metadata(path: Path) -> Any:
    """The DCP metadata of the checkpoint at `path` (OLMo-core's under model_and_optim/); OlmoError if unreadable."""
    return checkpoint_reader.read_metadata(core.weights_dir(path) if is_olmo_core(path) else path)


IMPLEMENTATION_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def load(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Restore weights (and the optimizer state, when `optimizer` is given) from `path` into a model wrapped any
    way at any world size; returns train_state. RNGs are restored by the caller (`rng_states.restore`) once everything
    else that draws random numbers is built."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    require_whole(path)
    t0 = time.perf_counter()
    if is_olmo_core(path):
        if optimizer is not None:
            raise OlmoError(f"{path} is an OLMo-core checkpoint: olmo starts from its weights (--init-from), "
                               "it cannot resume its optimizer")
        sd = _state_dicts(model, None)
        # DCP fills the tensors in place, so loading them under OLMo-core's names fills our state dict too
        _dcp_load({MODEL: {core.to_core(k): v for k, v in sd[MODEL].items()}}, core.weights_dir(path), path)
        set_model_state_dict(model, sd[MODEL])
        return dict(read_state(path), load_seconds=time.perf_counter() - t0)
    _load_ours(path, model, optimizer, _read_metadata(path))
    state = read_state(path)
    state["load_seconds"] = time.perf_counter() - t0
    return state


def _load_ours(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, meta: Any) -> None:
    """Our checkpoint into `model` (and `optimizer`): flattened optimizer state, or an older olmo's nested one."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    flat = _is_flat(meta)
    sd = _state_dicts(model, optimizer, flat=flat)
    taken = _hyperparameters_missing(sd[OPTIM], meta.state_dict_metadata) if optimizer is not None else []
    _dcp_load(sd, path)
    for where, key, value in taken:
        where[key] = value
    set_model_state_dict(model, sd[MODEL])
    if optimizer is None:
        return
    # how this process runs the optimizer (fused kernel or not, ...) is its own choice, not the checkpoint's:
    # loading a state dict would otherwise bring back the saving run's flags along with its hyperparameters
    flags = [{k: g[k] for k in IMPLEMENTATION_FLAGS if k in g} for g in optimizer.param_groups]
    options = StateDictOptions(flatten_optimizer_state_dict=flat)
    set_optimizer_state_dict(model, optimizer, sd[OPTIM], options=options)
    for group, own in zip(optimizer.param_groups, flags, strict=True):
        group.update(own)


def load_model_state(path: Path, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The whole model's weights from a checkpoint, in one process with no process group (export, tests):
    tensors are allocated from the checkpoint's own metadata, so no model needs to be built first."""
    require_whole(path)
    foreign = is_olmo_core(path)
    prefix = MODEL + "."
    sd = {k[len(prefix):]: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in _float_weights(path, prefix).items()}
    _dcp_load({MODEL: sd}, core.weights_dir(path) if foreign else path, path)
    if foreign:
        try:
            sd = {core.to_ours(k): v for k, v in sd.items()}
        except KeyError as e:
            raise OlmoError(f"{path}: OLMo-core parameter {e} has no place in olmo's OLMo 2/3 model") from None
    return {k: v.to(dtype) for k, v in sd.items()} if dtype else sd


def _float_weights(path: Path, prefix: str) -> dict[str, Any]:
    """The index entries of the model's tensors; OlmoError when one is not floating point (weights are floats:
    another dtype in the index is damage or a crafted checkpoint)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    weights = {k: m for k, m in _read_metadata(path).state_dict_metadata.items()
               if k.startswith(prefix) and isinstance(m, TensorStorageMetadata)}
    odd = next((k for k, m in weights.items() if not (isinstance(m.properties.dtype, torch.dtype)
                                                       and m.properties.dtype.is_floating_point)), None)
    if odd is not None:
        raise OlmoError(f"checkpoint {path}: its index gives {odd} the dtype {weights[odd].properties.dtype}, not "
                        "a floating-point one; it is damaged: use another checkpoint")
    return weights


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every weight's shape, under our names, from the checkpoint's DCP metadata alone (no tensors read)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    foreign = is_olmo_core(path)
    meta = _read_metadata(path)
    prefix = MODEL + "."
    shapes = {k[len(prefix):]: tuple(m.size) for k, m in meta.state_dict_metadata.items()
              if k.startswith(prefix) and isinstance(m, TensorStorageMetadata)}
    if not foreign:
        return shapes
    out = {}
    for k, v in shapes.items():
        try:
            out[core.to_ours(k)] = v
        except KeyError:
            out[k] = v  # a parameter we have no place for: the caller reports it as foreign
    return out


def shape_mismatch(path: Path, model_cfg: Any) -> str | None:
    """None when the checkpoint's weights have exactly the shapes `model_cfg` (a ModelConfig) gives, else the
    first difference (and how many more)."""
    from olmo.model import Transformer

    with torch.device("meta"):
        want = {k: tuple(v.shape) for k, v in Transformer(model_cfg).state_dict().items()}
    have = weight_shapes(path)
    differ = [f"{k}: {have.get(k)} here, {v} in the config" for k, v in want.items() if have.get(k) != v]
    differ += [f"{k}: not in the config" for k in sorted(set(have) - set(want))]
    if not differ:
        return None
    return differ[0] + (f", +{len(differ) - 1} more" if len(differ) > 1 else "")


def write_weights(folder: Path, weights: dict[str, torch.Tensor], train_state: dict[str, Any],
                  extra: dict[str, bytes] | None = None) -> None:
    """Write a weights-only checkpoint (no optimizer state), plus `extra` files, into `folder`, a fresh folder of
    the caller's: `olmo import-hf` makes these; `olmo train --init-from` and `olmo export-hf` read them."""
    import torch.distributed.checkpoint as dcp

    with _single_process_ok():
        dcp.save({MODEL: weights}, storage_writer=dcp.FileSystemWriter(folder, sync_files=True), no_dist=True)
    for name, data in (extra or {}).items():
        atomic_write_bytes(folder / name, data)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    state = dict(train_state, saved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), files=files)
    atomic_write_bytes(folder / TRAIN_STATE, json.dumps(state).encode())
    fsync_dir(folder)


def save_weights(path: Path, weights: dict[str, torch.Tensor], train_state: dict[str, Any],
                 extra: dict[str, bytes] | None = None) -> None:
    """`write_weights` at a new `path`: built in a temp folder beside it, then renamed into place (an existing
    non-empty `path` is never replaced: the rename fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.tmp-"))
    try:
        write_weights(tmp, weights, train_state, extra)
        os.rename(tmp, path)
        fsync_dir(path.parent)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():  # the temp folder this call made, when the rename did not happen
            shutil.rmtree(tmp)


def resolve(path: Path) -> Path:
    """A checkpoint dir as given, or the latest checkpoint of a run dir, ours or OLMo-core's (a save folder of
    `step<N>/model_and_optim/`); FileNotFoundError if neither."""
    if (path / TRAIN_STATE).is_file():
        return path
    found = latest(path) or core.find(path)
    if found is None:
        raise FileNotFoundError(path)
    return found
