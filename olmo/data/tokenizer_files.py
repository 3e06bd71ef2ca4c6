"""The tokenizer files that travel inside checkpoints, so `olmo export-hf` never has to guess.

`olmo import-hf` copies the model's tokenizer.json (and tokenizer_config.json, which names its BOS/EOS/pad
tokens) into the checkpoint; `olmo train` copies them into every checkpoint it saves, taken from, in order:
the tokenizer the training data was made with (its manifest records path and sha256; a changed file is not
taken), the checkpoint a resumed run continues, the `init_from` checkpoint. `olmo export-hf` uses the
checkpoint's own copy before searching the data manifests.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from olmo.config import TrainConfig

TOKENIZER_JSON, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"


def from_dir(directory: Path) -> dict[str, bytes]:
    """tokenizer.json (and its tokenizer_config.json) from `directory`; empty without a tokenizer.json."""
    files = {}
    for name in (TOKENIZER_JSON, TOKENIZER_CONFIG):
        if (directory / name).is_file():
            files[name] = (directory / name).read_bytes()
    return files if TOKENIZER_JSON in files else {}


def _from_data(cfg: TrainConfig) -> dict[str, bytes]:
    from olmo.data.shards import read_manifest

    for p in cfg.data.paths:
        manifest = read_manifest(Path(p)) if Path(p).is_dir() else None
        tok = (manifest or {}).get("tokenizer") or {}
        path = Path(str(tok.get("path", "")))
        if path.name and path.is_file():
            data = path.read_bytes()
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
