"""The one way olmo reads a torch.distributed.checkpoint (DCP) directory, ours or OLMo-core's: tensors and plain
values only, checked against what is asked for before a byte of data is read. Loading is never unpickling.

A DCP checkpoint is pickles all the way down: `.metadata` (the index) is one, and every item in the data files
is a `torch.save` archive. torch's own reader unpickles `.metadata` with the stock unpickler and every non-tensor
item ("bytes" items: an optimizer's learning rate, betas, parameter names) with `torch.load(weights_only=False)`,
so a crafted checkpoint runs code on `--resume`. Here instead:

    read_metadata(dir)   `.metadata` through an allowlist: DCP's own dataclasses and enums, torch.Size, dtypes,
                         layouts, a path; anything else is refused by name (the unpickler never imports it)
    SafeReader           every item's file is a plain name inside the checkpoint folder, a regular file, the
                         item's bytes lie inside it, and no stream transform is asked for; each item is read
                         through olmo/torch_bytes.py (an inert walk of its pickle, then weights_only=True)
    SafePlanner          before anything is read, every key asked for is in the index with the same kind
                         (tensor or bytes), shape and dtype family; a bytes item must come back as a plain value
                         of the same kind as the one the model or optimizer has now
    load(state, dir)     dcp.load with both; any refusal is one line naming the checkpoint and the item

OLMo-core's writer pickles its own storage-info class (torch's fields, minus the newer `transform_descriptors`):
it is read as torch's, so OLMo-core need not be installed to read its checkpoints. Its trainer state
(`train/rank*.pt`, whole pickles) is never opened.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from olmo import torch_bytes
from olmo.errors import ConfigError, OlmoError
from olmo_common.bounded.files import read_bytes

MAX_BYTES_ITEM = 64 << 20  # one non-tensor item (a parameter-name list is kilobytes)
_DATA_FILE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # DCP names them __<rank>_<n>.distcp

# --- the index: `.metadata` ------------------------------------------------------------------------------------
_CORE_STORAGE_INFO = ("olmo_core.distributed.checkpoint.filesystem", "_StorageInfo")
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem",
                "torch.distributed.checkpoint._extension")
_ALLOWED = {("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
            ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"), ("collections", "OrderedDict"),
            ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"), ("copyreg", "__newobj__"),
            ("copyreg", "_reconstructor"), ("builtins", "object")}


def _enum_member(cls: Any, name: Any) -> Any:
    """getattr as DCP metadata uses it (Python 3.11.2 and 3.12+ pickle an enum member as `getattr(enum, name)`;
    torch writes `_MEM_FORMAT_ENCODING` members so): only a member of one of DCP's own enums, never any other
    attribute of anything (a bound method fetched so would be called next, and run code)."""
    import enum

    if (isinstance(cls, type) and issubclass(cls, enum.Enum) and cls.__module__ in _DCP_MODULES
            and isinstance(name, str) and name in cls.__members__):
        return cls[name]
    raise ConfigError(f"checkpoint metadata looks up {getattr(cls, '__name__', type(cls).__name__)}."
                      f"{str(name)[:60]}, which DCP metadata never holds; refusing to load it (it could run code): "
                      "use a checkpoint written by olmo or OLMo-core")


def safe_class(module: str, name: str) -> Any:
    """The class a `.metadata` pickle may name, or ConfigError: DCP metadata holds nothing else."""
    import dataclasses
    import enum
    import importlib

    if (module, name) == _CORE_STORAGE_INFO:
        return _StorageInfo
    if (module, name) == ("builtins", "getattr"):
        return _enum_member
    if module == "torch":
        value = getattr(torch, name, None)
        if value is torch.Size or isinstance(value, torch.dtype | torch.layout | torch.memory_format):
            return value
    elif module in _DCP_MODULES and not name.startswith("__"):
        value = getattr(importlib.import_module(module), name, None)
        # its own dataclasses and enums only: never a function, a class it merely imports (Tensor, Path), or one
        # whose constructor acts (FileSystemWriter, the loaders that start threads)
        if isinstance(value, type) and value.__module__ == module and (
                dataclasses.is_dataclass(value) or issubclass(value, enum.Enum)):
            return value
    elif (module, name) in _ALLOWED:
        return getattr(importlib.import_module(module), name)
    raise ConfigError(f"checkpoint metadata names {module}.{name}, which DCP metadata never holds; refusing to "
                      "load it (it could run code): use a checkpoint written by olmo or OLMo-core")


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return safe_class(module, name)


def _open_regular(path: Path) -> IO[bytes]:
    """`path` opened for reading only if it is a regular file (a FIFO would block, a device never end)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path} is not a regular file; a checkpoint holds only files")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_storage(metadata: Metadata, where: Path) -> None:
    """Every item's bytes are named by a plain file name inside the checkpoint, at a sane offset and length."""
    for index, info in (metadata.storage_data or {}).items():
        name = getattr(info, "relative_path", None)
        offset, length = getattr(info, "offset", None), getattr(info, "length", None)
        what = getattr(index, "fqn", index)
        if not isinstance(name, str) or not _DATA_FILE.match(name) or name in (".", ".."):
            raise ConfigError(f"{where}/.metadata puts {what} in {name!r}, which is not a file of the checkpoint "
                              "folder; refusing it")
        if type(offset) is not int or type(length) is not int or offset < 0 or length < 0:
            raise ConfigError(f"{where}/.metadata gives {what} an invalid offset or length; the checkpoint is "
                              "damaged")
        if getattr(info, "transform_descriptors", None):
            raise ConfigError(f"{where}/.metadata asks for stream transforms ({info.transform_descriptors}) on "
                              f"{what}; olmo reads uncompressed DCP items only")


def read_metadata(where: Path) -> Metadata:
    """The DCP index of the checkpoint folder `where`, unpickled through the allowlist and checked."""
    try:  # read within its cap first: a pickle's own length fields would otherwise size what it allocates
        data = read_bytes(where / ".metadata", "checkpoint index")
    except OSError as e:
        raise ConfigError(f"{where}/.metadata cannot be read ({e.strerror}); pick another checkpoint") from None
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    except OlmoError:
        raise
    except Exception as e:  # truncated or garbage bytes: pickle raises many types
        raise ConfigError(f"{where}/.metadata is damaged ({type(e).__name__}: {e}); pick another checkpoint"
                          ) from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise ConfigError(f"{where}/.metadata is not DCP metadata ({type(metadata).__name__})")
    if not isinstance(metadata.storage_data, dict):
        raise ConfigError(f"{where}/.metadata has no storage index; the checkpoint is damaged")
    _check_storage(metadata, where)
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    return metadata


# --- the data files ----------------------------------------------------------------------------------------------
class _Slice(io.RawIOBase):
    """A seekable read-only window [offset, offset + length) of an open file: one item's torch.save archive."""

    def __init__(self, f: IO[bytes], offset: int, length: int):
        super().__init__()
        self.f, self.start, self.length, self.pos = f, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self.length - self.pos))
        if n == 0:
            return 0
        self.f.seek(self.start + self.pos)
        got = self.f.readinto(view[:n])  # type: ignore[attr-defined]
        self.pos += got or 0
        return got or 0


def _narrow(tensor: torch.Tensor, offsets: Any, lengths: Any, what: str) -> torch.Tensor:
    if tensor.dim() != len(offsets) or len(offsets) != len(lengths):
        raise ConfigError(f"{what}: a stored piece has {tensor.dim()} dimensions where the index says "
                          f"{len(lengths)}; the checkpoint is damaged")
    for dim, (offset, length) in enumerate(zip(offsets, lengths, strict=True)):
        if offset < 0 or offset + length > tensor.size(dim):
            raise ConfigError(f"{what}: the index asks for more of a stored piece than it holds; the checkpoint "
                              "is damaged")
        if length < tensor.size(dim):
            tensor = tensor.narrow(dim, offset, length)
    return tensor


class SafeReader(dcp.FileSystemReader):
    """torch's FileSystemReader with the index and every item read as described in the module docstring."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = read_metadata(Path(self.path))
        metadata.storage_meta.load_id = self.load_id  # type: ignore[union-attr]
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        _check_storage(metadata, Path(self.path))  # also when a caller hands DCP a metadata object of its own
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        per_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for name, items in per_file.items():
            with _open_regular(Path(self.path) / name) as f:
                size = os.fstat(f.fileno()).st_size
                for item in items:
                    self._read_item(f, size, item, planner)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _read_item(self, f: IO[bytes], size: int, item: ReadItem, planner: LoadPlanner) -> None:
        info = self.storage_data[item.storage_index]
        what = item.dest_index.fqn
        if info.offset + info.length > size:
            raise ConfigError(f"{what} lies past the end of {info.relative_path}; the checkpoint is truncated")
        if item.type == LoadItemType.BYTE_IO:
            if info.length > MAX_BYTES_ITEM:
                raise ConfigError(f"{what} is {info.length} bytes, far more than a plain value needs; refusing it")
            f.seek(info.offset)
            planner.load_bytes(item, io.BytesIO(f.read(info.length)))
            return
        stream = io.BufferedReader(_Slice(f, info.offset, info.length))
        tensor = _narrow(torch_bytes.load_tensor(stream, what), item.storage_offsets, item.lengths, what)
        target = planner.resolve_tensor(item).detach()
        if target.size() != tensor.size():
            raise ConfigError(f"{what}: a stored piece has shape {tuple(tensor.size())} where "
                              f"{tuple(target.size())} is expected; the checkpoint is damaged")
        target.copy_(tensor)
        planner.commit_tensor(item, target)


# --- what is asked for against what is there ---------------------------------------------------------------------
def _same_kind(want: Any, got: Any) -> bool:
    """Whether a loaded plain value can stand where the live optimizer has `want` (numbers for numbers, ...)."""
    if want is None or got is None:
        return True  # flags such as `fused` are None or a bool
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool)
    if isinstance(want, int | float | torch.Tensor):
        return isinstance(got, int | float) or (isinstance(got, torch.Tensor) and got.numel() == 1)
    if isinstance(want, str):
        return isinstance(got, str)
    if isinstance(want, list | tuple):
        return isinstance(got, list | tuple) and (len(got) == len(want) or all(isinstance(w, str) for w in want))
    return False


def _dtype_fits(stored: Any, live: torch.dtype) -> bool:
    return stored == live or (isinstance(stored, torch.dtype) and stored.is_floating_point and live.is_floating_point)


def _check_entry(fqn: str, live: Any, md: Any) -> None:
    if md is None:
        raise ConfigError(f"it has no {fqn} (another model or optimizer?); use a checkpoint of this model")
    if not isinstance(live, torch.Tensor):
        if not isinstance(md, BytesStorageMetadata):
            raise ConfigError(f"it stores {fqn} as a tensor where olmo keeps a plain value; it is damaged or of "
                              "another optimizer")
        return
    if not isinstance(md, TensorStorageMetadata):
        raise ConfigError(f"it stores {fqn} as a pickled object where olmo expects a tensor of shape "
                          f"{tuple(live.size())}; refusing it (it could run code)")
    stored, dtype = tuple(md.size), getattr(md.properties, "dtype", None)
    if stored != tuple(live.size()):
        raise ConfigError(f"its {fqn} has shape {stored}, the model here {tuple(live.size())}; use a checkpoint "
                          "of this model")
    if not _dtype_fits(dtype, live.dtype):
        raise ConfigError(f"its {fqn} is {dtype}, the model here {live.dtype}; use a checkpoint of this model")


class SafePlanner(DefaultLoadPlanner):
    """DCP's load planner with the check before reading and plain-value bytes items (no torch.load of them)."""

    def create_local_plan(self) -> LoadPlan:
        assert self.metadata is not None
        for fqn, live in self.state_dict.items():
            try:
                _check_entry(fqn, live, self.metadata.state_dict_metadata.get(fqn))
            except (TypeError, ValueError, AttributeError):  # index fields of the wrong type: a crafted .metadata
                raise ConfigError(f"its index entry for {fqn} is malformed; the checkpoint is damaged") from None
        return super().create_local_plan()

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        from torch.distributed.checkpoint._traverse import set_element

        fqn = read_item.dest_index.fqn
        got = torch_bytes.load_value(value.getvalue(), fqn)
        if not _same_kind(self.state_dict.get(fqn), got):
            raise ConfigError(f"its {fqn} is a {type(got).__name__} where olmo's optimizer has a "
                              f"{type(self.state_dict.get(fqn)).__name__}; it is damaged or of another optimizer")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], got)
        else:
            self.state_dict[fqn] = got


# --- loading -----------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _single_process_ok() -> Iterator[None]:
    """DCP warns "assuming the intent is to save/load in a single process" without a process group: it is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*in a single process.*")
        yield


def _our_error(e: BaseException) -> OlmoError | None:
    """The OlmoError a DCP failure wraps (DCP gathers every rank's exception into a CheckpointException)."""
    todo, seen = [e], set()
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, OlmoError):
            return cur
        todo += [x for x in (cur.__cause__, cur.__context__) if x is not None]
        for failure in (getattr(cur, "failures", None) or {}).values():
            inner = failure[0] if isinstance(failure, tuple) and failure else getattr(failure, "exc", failure)
            if isinstance(inner, BaseException):
                todo.append(inner)
    return None


def load(state_dict: dict[str, Any], where: Path, path_for_errors: Path | None = None) -> None:
    """Fill `state_dict` (tensors in place, plain values replaced) from the DCP folder `where`; OlmoError, one
    line naming the checkpoint, when it is damaged, of another model, or holds anything but tensors and plain
    values."""
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException, not an Exception

    shown = path_for_errors or where
    try:
        with _single_process_ok():
            dcp.load(state_dict, storage_reader=SafeReader(where), planner=SafePlanner(),
                     no_dist=not dist.is_initialized())
    except (Exception, CheckpointException) as e:
        ours = _our_error(e)
        if ours is not None:
            raise ConfigError(f"checkpoint {shown}: {ours}") from None
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)[:300]
        raise OlmoError(f"checkpoint {shown} cannot be loaded ({first}); it is damaged or of another model: use "
                        "another checkpoint") from None
