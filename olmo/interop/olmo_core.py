"""OLMo-core checkpoints, read as our own: `olmo train --init-from` and `olmo export-hf` accept them.

OLMo-core's trainer (3.x) writes a save folder of `step<N>/` directories, each

    step1000/   model_and_optim/.metadata + __<rank>_0.distcp   (one DCP checkpoint: keys model.* and optim.*)
                train/rank<R>.pt                                (trainer state, torch.save pickles)
                .metadata.json                                  (OLMo-core's checkpoint metadata)
                config.json                                     (the experiment config; its "model" is the
                                                                 TransformerConfig, as_config_dict() form)

and `save_model_and_optim_state(dir, ...)` alone writes just the DCP files into `dir`. We read the weights
through olmo/checkpoint_reader.py (never the pickled trainer state: loading a pickle runs code) and translate
the `model` section of config.json into our ModelConfig. Our own checkpoints go the other way with no
conversion: their folders are named `step<N>` and hold the DCP `.metadata` at the top, which OLMo-core's
`Checkpointer.find_checkpoints` / `dir_is_checkpoint` accept; they carry OLMo-core's `.metadata.json` (so
`find_checkpoints(ephemeral=False)` keeps them); and their parameter names are the ones in PARAM_NAMES, so
`olmo_core.distributed.checkpoint.load_model_and_optim_state` loads them into an OLMo-core Transformer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from olmo.interop.core_options import UnsupportedOption, check
from olmo_common.bounded.data import load_json

MODEL_AND_OPTIM = "model_and_optim"
CONFIG_JSON = "config.json"
METADATA_JSON = ".metadata.json"  # OLMo-core's CheckpointMetadata; its find_checkpoints(ephemeral=...) reads it
STEP_RE = re.compile(r"^step(\d+)$")  # OLMo-core's Checkpointer.CHECKPOINT_DIR, "step{step}"

# The one table of parameter names: OLMo-core's (OLMo 2/3 Transformer with reordered-norm blocks) -> ours, per
# block ({i} is the block index) and for the model ends. Today every name is the same, because our model was
# written to OLMo-core's names; a rename on either side is an edit here and nowhere else.
PARAM_NAMES: dict[str, str] = {
    "embeddings.weight": "embeddings.weight",
    "blocks.{i}.attention.w_q.weight": "blocks.{i}.attention.w_q.weight",
    "blocks.{i}.attention.w_k.weight": "blocks.{i}.attention.w_k.weight",
    "blocks.{i}.attention.w_v.weight": "blocks.{i}.attention.w_v.weight",
    "blocks.{i}.attention.w_out.weight": "blocks.{i}.attention.w_out.weight",
    "blocks.{i}.attention.q_norm.weight": "blocks.{i}.attention.q_norm.weight",
    "blocks.{i}.attention.k_norm.weight": "blocks.{i}.attention.k_norm.weight",
    "blocks.{i}.attention_norm.weight": "blocks.{i}.attention_norm.weight",
    "blocks.{i}.feed_forward.w1.weight": "blocks.{i}.feed_forward.w1.weight",
    "blocks.{i}.feed_forward.w2.weight": "blocks.{i}.feed_forward.w2.weight",
    "blocks.{i}.feed_forward.w3.weight": "blocks.{i}.feed_forward.w3.weight",
    "blocks.{i}.feed_forward_norm.weight": "blocks.{i}.feed_forward_norm.weight",
    "lm_head.norm.weight": "lm_head.norm.weight",
    "lm_head.w_out.weight": "lm_head.w_out.weight",
}


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(template).replace(re.escape("{i}"), r"(\d+)") + "$")


_TO_OURS = [(_pattern(core), ours) for core, ours in PARAM_NAMES.items()]
_TO_CORE = [(_pattern(ours), core) for core, ours in PARAM_NAMES.items()]


def _translate(name: str, table: list[tuple[re.Pattern[str], str]]) -> str:
    for pat, target in table:
        m = pat.match(name)
        if m:
            return target.replace("{i}", m.group(1)) if m.groups() else target
    raise KeyError(name)


def to_ours(name: str) -> str:
    """Our parameter name for OLMo-core's `name`; KeyError for a parameter we have no place for."""
    return _translate(name, _TO_OURS)


def to_core(name: str) -> str:
    """OLMo-core's parameter name for our `name`."""
    return _translate(name, _TO_CORE)


def metadata_json() -> bytes:
    """`.metadata.json` as OLMo-core writes it (CheckpointMetadata.as_dict): ours are never ephemeral."""
    from importlib import metadata

    try:
        version = metadata.version("olmo-doctor")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return json.dumps({"ephemeral": False, "version": f"olmo-doctor {version}"}).encode()


def is_checkpoint(path: Path) -> bool:
    """A checkpoint directory OLMo-core's trainer wrote (weights under model_and_optim/)."""
    return (path / MODEL_AND_OPTIM / ".metadata").is_file()


def find(path: Path) -> Path | None:
    """`path` if it is an OLMo-core checkpoint, else the highest `step<N>` checkpoint in it (a save folder)."""
    if is_checkpoint(path):
        return path
    if not path.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in path.iterdir() if (m := STEP_RE.match(p.name)) and is_checkpoint(p)]
    return max(found)[1] if found else None


def weights_dir(path: Path) -> Path:
    """The DCP directory of an OLMo-core checkpoint."""
    return path / MODEL_AND_OPTIM


def step_of(path: Path) -> int:
    m = STEP_RE.match(path.name)
    return int(m.group(1)) if m else 0


def _nested_get(tree: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(k)  # type: ignore[assignment]
    return tree


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def model_config_dict(core: dict[str, Any], training: bool = False) -> dict[str, Any]:
    """Our `model:` section for OLMo-core's TransformerConfig dict. UnsupportedOption naming the first option olmo
    cannot represent (interop/core_options.py has the table; `training`: for --init-from, where training-only
    options such as dropout count too); ValueError for a config that is not one at all."""
    if not isinstance(core.get("block", {}), dict):
        raise ValueError("'block' is not a mapping")
    check(core, training)
    block = _dict(core.get("block"))
    attn = _dict(block.get("sequence_mixer") or block.get("attention"))  # 3.x names it sequence_mixer
    ff = _dict(block.get("feed_forward"))
    rope = _dict(attn.get("rope"))
    for key in ("d_model", "n_layers", "vocab_size"):
        if not isinstance(core.get(key), int):
            raise ValueError(f"no integer '{key}' in the model config")
    out: dict[str, Any] = {"d_model": core["d_model"], "n_layers": core["n_layers"], "vocab_size": core["vocab_size"],
                           "n_heads": attn.get("n_heads", 16), "qk_norm": attn.get("qk_norm") is not None}
    for ours, value in (("n_kv_heads", attn.get("n_kv_heads")), ("head_dim", attn.get("head_dim")),
                        ("mlp_hidden", ff.get("hidden_size")), ("rope_theta", rope.get("theta")),
                        ("norm_eps", _nested_get(block, "layer_norm", "eps"))):  # not init_std: weights are loaded
        if value is not None:
            out[ours] = value
    swa = _dict(attn.get("sliding_window"))
    if swa:
        if not isinstance(swa.get("pattern"), list):
            raise ValueError("sliding_window without a 'pattern' list")
        out["sliding_window"] = list(swa["pattern"])
        out["swa_full_first_layer"] = bool(swa.get("force_full_attention_on_first_layer", True))
        out["swa_full_last_layer"] = bool(swa.get("force_full_attention_on_last_layer", True))
    return out


def read_model_config(path: Path, training: bool = False) -> dict[str, Any] | None:
    """Our `model:` section from the checkpoint's config.json (OLMo-core's ConfigSaverCallback writes it into
    every checkpoint); None when there is none. ValueError when it is there but unreadable; UnsupportedOption
    (naming the checkpoint and the option) when it holds a model olmo cannot represent."""
    conf = path / CONFIG_JSON
    if not conf.is_file():
        return None
    try:
        data = load_json(conf, "model config")
    except (OSError, ValueError, RecursionError) as e:  # ValueError: not JSON, or not UTF-8
        raise ValueError(f"{conf} is not JSON ({e})") from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict):
        raise ValueError(f"{conf} has no 'model' section")
    try:
        return model_config_dict(model, training)
    except UnsupportedOption as e:
        raise UnsupportedOption(f"checkpoint {path}: {e}") from None


def train_state(path: Path) -> dict[str, Any]:
    """What our train_state.json would say about an OLMo-core checkpoint: the step and (when config.json is
    there) the model config; `format` marks it as OLMo-core's."""
    model = read_model_config(path)
    return {"step": step_of(path), "format": "olmo-core", "config": {"model": model} if model is not None else {}}
