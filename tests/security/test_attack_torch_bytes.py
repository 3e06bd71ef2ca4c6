"""The item reader under every checkpoint load (olmo/torch_bytes.py): a torch.save archive whose pickle names
anything but what torch writes for a tensor is refused before it is unpickled, whatever the pickle protocol,
however the payload is wrapped; real tensors and plain values still come back exactly."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
from _crafted import Payload

from olmo import torch_bytes
from olmo.torch_bytes import UnsafeItem


def archive(data_pkl: bytes, extra: dict[str, bytes] | None = None) -> bytes:
    """A zip laid out as torch.save lays it out, with `data_pkl` as its pickle."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", "little")
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return buf.getvalue()


def saved(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_payload_is_refused_at_every_protocol(protocol: int, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    blob = archive(pickle.dumps(Payload(marker), protocol=protocol))
    with pytest.raises(UnsafeItem, match="exec"):
        torch_bytes.load_value(blob, "optim.param_groups.0.lr")
    with pytest.raises(UnsafeItem, match="exec"):
        torch_bytes.load_tensor(io.BytesIO(blob), "model.w")
    assert not marker.exists()


@pytest.mark.parametrize("wrap", ["dict-with-a-tensor", "tuple", "deep-list", "ordered-dict"])
def test_a_payload_wrapped_beside_real_values_is_refused(wrap: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    p = Payload(marker)
    obj = {"dict-with-a-tensor": {"t": torch.ones(2), "x": p}, "tuple": (0.9, p), "deep-list": [[[[p]]]],
           "ordered-dict": __import__("collections").OrderedDict(a=p)}[wrap]
    with pytest.raises(UnsafeItem):
        torch_bytes.load_value(saved(obj), "item")
    assert not marker.exists()


def test_a_bare_pickle_and_other_layouts_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    for blob in (pickle.dumps(Payload(marker)), b"", b"PK\x03\x04junk",
                 archive(b"N.", {"other/data.pkl": pickle.dumps(Payload(marker))})):
        with pytest.raises(UnsafeItem):
            torch_bytes.load_value(blob, "item")
    assert not marker.exists()


def test_an_oversized_pickle_is_refused_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_bytes, "MAX_PICKLE_BYTES", 1000)
    with pytest.raises(UnsafeItem, match="over"):
        torch_bytes.load_value(saved(["x" * 2000]), "optim.param_groups.0.params")


def test_a_plain_value_where_a_tensor_is_indexed_is_refused() -> None:
    with pytest.raises(UnsafeItem, match="damaged"):
        torch_bytes.load_tensor(io.BytesIO(saved(3.0)), "model.w")


@pytest.mark.parametrize("value", [1e-3, (0.9, 0.95), ["blocks.0.w", "blocks.1.w"], None, True, 7, "x"])
def test_plain_values_come_back(value: object) -> None:
    assert torch_bytes.load_value(saved(value), "item") == value


@pytest.mark.parametrize("tensor", [torch.randn(3, 4), torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
                                    torch.tensor(5.0), torch.randn(4, 4)[1:3]])
def test_tensors_come_back(tensor: torch.Tensor) -> None:
    got = torch_bytes.load_tensor(io.BytesIO(saved(tensor)), "model.w")
    assert got.dtype == tensor.dtype and torch.equal(got, tensor)
    assert torch.equal(torch_bytes.load_value(saved(tensor), "optim.lr"), tensor)  # an lr kept as a tensor
