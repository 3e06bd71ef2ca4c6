"""DCP's `.metadata` as Python 3.11.2 and 3.12+ pickle it: an enum member as `getattr(<enum>, <name>)`.

Found by the lowest-versions step of .ci/run: a checkpoint saved under /usr/bin/python3.11 (3.11.2, Debian 12)
could not be resumed, because DCP's TensorProperties pickles its memory format as `_MEM_FORMAT_ENCODING` members and
the metadata reader refused `builtins.getattr`. It now takes getattr for a member of DCP's own enums only; the
attack below (getattr fetching a bound method that the pickle then calls) must still be refused.
"""

from __future__ import annotations

import enum
import io
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from olmo import checkpoint
from olmo.checkpoint_reader import read_metadata
from olmo.data.corpus import TOKENIZER_PATH


class _EnumsByName(pickle.Pickler):
    """Pickles enum members as Python 3.11.2 / 3.12 do, whatever Python runs the test."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, enum.Enum):
            return getattr, (type(obj), obj.name)
        return NotImplemented


def _repickle(metadata_file: Path, change: Callable[[Any], None] = lambda m: None) -> None:
    meta = read_metadata(metadata_file.parent)
    meta.storage_meta = None
    change(meta)
    buf = io.BytesIO()
    _EnumsByName(buf).dump(meta)
    assert b"getattr" in buf.getvalue() and b"_MEM_FORMAT_ENCODING" in buf.getvalue()
    metadata_file.write_bytes(buf.getvalue())


def _checkpoint(tmp_path: Path) -> Path:
    from olmo.config import ModelConfig
    from olmo.model import Transformer

    step = tmp_path / "step1"
    model = Transformer(ModelConfig(d_model=32, n_layers=1, n_heads=4, mlp_hidden=64, vocab_size=768))
    checkpoint.save_weights(step, model.state_dict(), {"step": 1, "config": {"model": {
        "d_model": 32, "n_layers": 1, "n_heads": 4, "mlp_hidden": 64, "vocab_size": 768}}})
    return step


def test_metadata_with_enum_members_by_name_loads(tmp_path: Path) -> None:
    step = _checkpoint(tmp_path)
    before = checkpoint.load_model_state(step)
    _repickle(step / checkpoint.METADATA)
    state = checkpoint.read_state(step)
    state["files"][checkpoint.METADATA] = (step / checkpoint.METADATA).stat().st_size
    (step / checkpoint.TRAIN_STATE).write_text(json.dumps(state))  # the size it was saved with changed
    after = checkpoint.load_model_state(step)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


class _CallsTouch:
    """Unpickling this calls PosixPath(marker).touch(): pickle stores the bound method as getattr(path, "touch")."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (self.marker.touch, ())


def test_getattr_for_anything_but_a_dcp_enum_member_is_refused(tmp_path: Path,
                                                               cli: Callable[..., tuple[int, str, str]]) -> None:
    step = _checkpoint(tmp_path)
    marker = tmp_path / "pwned"

    def booby_trap(meta: Any) -> None:
        meta.planner_data = _CallsTouch(marker)

    _repickle(step / checkpoint.METADATA, booby_trap)
    assert b"touch" in (step / checkpoint.METADATA).read_bytes()
    code, _, err = cli("export-hf", str(step), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 2 and "refusing to load it" in err and "touch" in err, err
    assert not marker.exists() and not (tmp_path / "hf").exists()
