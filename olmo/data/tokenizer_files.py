"""The tokenizer files that travel inside checkpoints, so `olmo export-hf` never has to guess.

`olmo import-hf` copies the model's tokenizer.json (and tokenizer_config.json, which names its BOS/EOS/pad
tokens) into the checkpoint; `olmo train` copies them into every checkpoint it saves, taken from, in order:
the tokenizer the training data was made with (its manifest records path and sha256; a changed file is not
taken), the checkpoint a resumed run continues, the `init_from` checkpoint. `olmo export-hf` uses the
checkpoint's own copy before searching the data manifests.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from olmo.config import TrainConfig
from olmo.fsutil import inside_folder
from olmo_common.bounded.files import read_bytes

TOKENIZER_JSON, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"


_KINDS = {TOKENIZER_JSON: "tokenizer", TOKENIZER_CONFIG: "tokenizer config"}


def from_dir(directory: Path) -> dict[str, bytes]:
    """tokenizer.json (and its tokenizer_config.json) from `directory`; empty without a tokenizer.json. OlmoError
    for one that is a symlink leading out of `directory`, or too large to be a tokenizer file."""
    from olmo.errors import OlmoError

    files = {}
    for name in (TOKENIZER_JSON, TOKENIZER_CONFIG):
        path = directory / name
        if not path.is_file():
            continue
        if not inside_folder(path, directory):
            raise OlmoError(f"{path} is a symlink to {os.path.realpath(path)}, outside {directory}; olmo copies only "
                            "the folder's own files: put a copy of the file itself there")
        try:
            files[name] = read_bytes(path, _KINDS[name])
        except OSError as e:
            raise OlmoError(f"{path} cannot be read as a tokenizer file ({e.strerror})") from None
    return files if TOKENIZER_JSON in files else {}


def _from_data(cfg: TrainConfig) -> dict[str, bytes]:
    from olmo.data.shards import read_manifest

    for p in cfg.data.paths:
        manifest = read_manifest(Path(p)) if Path(p).is_dir() else None
        tok = (manifest or {}).get("tokenizer") or {}
        path = Path(str(tok.get("path", "")))
        if path.name and path.is_file():
            try:
                data = read_bytes(path, "tokenizer")
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() == tok.get("sha256"):
                return {TOKENIZER_JSON: data, **{k: v for k, v in from_dir(path.parent).items()
                                                 if k == TOKENIZER_CONFIG and path.name == TOKENIZER_JSON}}
    return {}


def for_run(cfg: TrainConfig, resumed_from: Path | None, init_from: Path | None) -> dict[str, bytes]:
    """{file name: bytes} to write into each checkpoint of this run; empty when no tokenizer can be found."""
    for found in (_from_data(cfg), from_dir(resumed_from) if resumed_from else {},
                  from_dir(init_from) if init_from else {}):
        if found:
            return found
    return {}
