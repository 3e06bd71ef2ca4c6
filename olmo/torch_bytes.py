"""One value from the bytes `torch.save` wrote, read without running what the bytes name.

A checkpoint's data files hold one `torch.save` archive per item: a tensor (a piece of a weight or of the
optimizer's state) or a plain value (a learning rate, AdamW's betas, the parameter names of a group). Inside each
archive `data.pkl` is a pickle, and unpickling calls whatever the pickle names. So before torch sees the bytes,
`data.pkl` is walked by an unpickler that calls nothing: the only names it admits are the ones `torch.save` writes
for a tensor (`torch._utils._rebuild_tensor_v2`, a typed storage class, `collections.OrderedDict`), and each
becomes an inert stand-in. Anything else is refused by name (UnsafeItem). A plain value comes straight out of that
walk; a tensor is then read by `torch.load(weights_only=True)`, whose own allowlist is the second fence.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from functools import cache
from typing import IO, Any

import torch

from olmo.errors import ConfigError

MAX_PICKLE_BYTES = 64 << 20  # data.pkl of one item: a few hundred bytes for a tensor, kilobytes for a name list
MAX_DEPTH = 8  # nesting of a plain value: AdamW's betas are a tuple in a group, two levels


class UnsafeItem(ConfigError):
    """A checkpoint item that is not a tensor or a plain value: refused before anything in it runs."""


@cache
def _tensor_globals() -> frozenset[tuple[str, str]]:
    """The names `torch.save` pickles for a plain tensor: its rebuild function and its storage's class."""
    names = {("torch._utils", "_rebuild_tensor_v2")}
    for name in dir(torch):
        value = getattr(torch, name, None)
        if name.endswith("Storage") and isinstance(value, type) and (
                issubclass(value, torch.storage.TypedStorage) or value is torch.UntypedStorage):
            names.add(("torch", name))
    return frozenset(names)


class _Inert:
    """What an admitted tensor name stands for during the walk: called, it only returns another stand-in."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Inert:
        return self


class _Walk(pickle.Unpickler):
    """Unpickles `data.pkl` calling nothing: admitted names become stand-ins, storages are only counted."""

    def __init__(self, f: IO[bytes], what: str):
        super().__init__(f)
        self.what = what
        self.storages = 0

    def find_class(self, module: str, name: str) -> Any:
        module = "builtins" if module == "__builtin__" else module  # protocol 2's spelling, as pickle maps it
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) in _tensor_globals():
            return _Inert()
        raise UnsafeItem(f"{self.what} is a pickled {module}.{name}, not a tensor or a plain value; refusing to "
                         "load it (it could run code): use a checkpoint written by olmo or OLMo-core")

    def persistent_load(self, pid: Any) -> Any:
        self.storages += 1
        return _Inert()


def _data_pkl(stream: IO[bytes], what: str) -> tuple[zipfile.ZipFile, str]:
    if not zipfile.is_zipfile(stream):
        raise UnsafeItem(f"{what} is not a torch.save archive (olmo reads only the zip format torch has written "
                         "since 1.6); it is damaged or was not written by DCP")
    stream.seek(0)
    archive = zipfile.ZipFile(stream)
    names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")]
    if len(names) != 1:
        raise UnsafeItem(f"{what} is a zip archive without exactly one data.pkl; it is damaged or was not written "
                         "by DCP")
    return archive, names[0]


def _walk(stream: IO[bytes], what: str) -> tuple[Any, int]:
    """The value data.pkl holds (stand-ins for any tensor) and how many storages it refers to."""
    archive, name = _data_pkl(stream, what)
    with archive.open(name) as f:
        body = f.read(MAX_PICKLE_BYTES + 1)
    if len(body) > MAX_PICKLE_BYTES:
        raise UnsafeItem(f"{what}: its data.pkl is over {MAX_PICKLE_BYTES >> 20} MiB, far more than a tensor or "
                         "a plain value needs; refusing it")
    walk = _Walk(io.BytesIO(body), what)
    try:
        value = walk.load()
    except UnsafeItem:
        raise
    except RecursionError:
        raise UnsafeItem(f"{what} is nested too deeply to be a tensor or a plain value; refusing it") from None
    except Exception as e:  # truncated or garbage bytes: pickle raises many types
        raise UnsafeItem(f"{what} cannot be read ({type(e).__name__}); the checkpoint is damaged") from None
    return value, walk.storages


def _plain(value: Any, depth: int = 0) -> bool:
    """None, a bool, number or string, or lists/tuples of them (what an optimizer's param group holds)."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple) and depth < MAX_DEPTH:
        return all(_plain(v, depth + 1) for v in value)
    return False


def load_tensor(stream: IO[bytes], what: str) -> torch.Tensor:
    """The tensor one item holds; UnsafeItem for anything else. `stream` is seekable and holds only the item."""
    value, storages = _walk(stream, what)
    if storages == 0 or not isinstance(value, _Inert):
        raise UnsafeItem(f"{what} holds a {type(value).__name__} where the checkpoint's index says a tensor; the "
                         "checkpoint is damaged")
    stream.seek(0)
    try:
        tensor = torch.load(stream, map_location="cpu", weights_only=True)
    except Exception as e:
        raise UnsafeItem(f"{what} cannot be read as a tensor ({type(e).__name__}); the checkpoint is damaged"
                         ) from None
    if type(tensor) is not torch.Tensor:
        raise UnsafeItem(f"{what} holds a {type(tensor).__name__}, not a plain tensor; refusing it")
    return tensor


def load_value(data: bytes, what: str) -> Any:
    """The plain value (or a small tensor, e.g. a learning rate kept as one) one bytes item holds."""
    stream = io.BytesIO(data)
    value, storages = _walk(stream, what)
    if storages:
        return load_tensor(stream, what)
    if not _plain(value):
        raise UnsafeItem(f"{what} holds a {type(value).__name__}, not a plain value; refusing it")
    return value
