"""A tokenizer's BOS and padding tokens (EOS is found by olmo/data/prepare.py's load_tokenizer).

The shard manifest records all three ids, as OLMo-core's TokenizerConfig needs (eos_token_id, pad_token_id,
bos_token_id), and the Hugging Face export writes the same tokens into tokenizer_config.json. A
tokenizer_config.json beside the tokenizer.json (a Hugging Face model folder) is the authority; without one,
the tokenizer's own added tokens are searched by name. None when a tokenizer has no such token (OLMo 2's
dolma2 tokenizer has no BOS).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmo_common.bounded.data import load_json

BOS_NAMES = ("<|begin_of_text|>", "<|startoftext|>", "<s>", "<bos>", "<|bos|>", "[BOS]")


def _config(path: Path) -> dict[str, Any]:
    conf = path.parent / "tokenizer_config.json"
    try:
        data = load_json(conf, "tokenizer config") if conf.is_file() else {}
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def special_tokens(tokenizer: Any, path: Path) -> dict[str, str | None]:
    """{"bos": token or None, "pad": token or None} for a loaded `tokenizers.Tokenizer` read from `path`. A key
    the tokenizer_config.json sets (null included: "this tokenizer has none") wins over the search by name."""
    added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
    conf = _config(path)
    found: dict[str, str | None] = {}
    for key, guess in (("bos", next((n for n in BOS_NAMES if n in added), None)),
                       ("pad", next((t for t in added if "pad" in t.lower()), None))):
        token = conf.get(f"{key}_token", guess)
        if isinstance(token, dict):  # the AddedToken form: {"content": "<|pad|>", ...}
            token = token.get("content")
        found[key] = token if isinstance(token, str) and tokenizer.token_to_id(token) is not None else None
    return found


def special_ids(tokenizer: Any, path: Path) -> dict[str, int | None]:
    """{"bos_id": ..., "pad_id": ...}: the ids of `special_tokens`, None where there is no such token."""
    return {f"{k}_id": (tokenizer.token_to_id(v) if v else None) for k, v in special_tokens(tokenizer, path).items()}
