"""Hugging Face conversion: our checkpoints <-> transformers' `Olmo2ForCausalLM` / `Olmo3ForCausalLM` folders.

    olmo export-hf runs/olmo/checkpoints/step1000 hf/my-olmo     # config.json + safetensors + tokenizer
    olmo import-hf hf/OLMo-2-0425-1B ckpt/olmo2-1b                   # a weights-only checkpoint + recipe.yaml

Our parameter names are OLMo-core's, and the key map is OLMo-core's `nn/hf/convert.py`: the
OLMo 2 block's post-norms are `post_attention_layernorm` (our `attention_norm`) and
`post_feedforward_layernorm` (our `feed_forward_norm`), and the head's norm is the model's final `norm`. A model
with sliding-window layers is exported as Olmo 3 (`layer_types` names each layer; `sliding_window` counts the
tokens a query sees, itself included, which is our convention too). Nothing here needs the network or
transformers itself: config.json is written from our config (the flat `rope_theta` form released OLMo
checkpoints use, which transformers 4.x and 5.x both read), the weights with `safetensors`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from olmo import checkpoint
from olmo.config import ConfigError, DataConfig, ModelConfig, OptimConfig, TrainConfig
from olmo.fsutil import check_output_dir, fsync_dir, read_small

SHARD_BYTES = 5 * 1024**3  # safetensors files of at most 5 GiB, as Hugging Face's save_pretrained default
_FIXED = {"embeddings.weight": "model.embed_tokens.weight", "lm_head.norm.weight": "model.norm.weight",
          "lm_head.w_out.weight": "lm_head.weight"}
_BLOCK = {"attention.w_q": "self_attn.q_proj", "attention.w_k": "self_attn.k_proj", "attention.w_v": "self_attn.v_proj",
          "attention.w_out": "self_attn.o_proj", "attention.q_norm": "self_attn.q_norm",
          "attention.k_norm": "self_attn.k_norm", "attention_norm": "post_attention_layernorm",
          "feed_forward.w1": "mlp.gate_proj", "feed_forward.w3": "mlp.up_proj", "feed_forward.w2": "mlp.down_proj",
          "feed_forward_norm": "post_feedforward_layernorm"}
_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.(.+)\.weight$")
_HF_BLOCK_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.weight$")


def to_hf_key(name: str) -> str:
    if name in _FIXED:
        return _FIXED[name]
    m = _BLOCK_RE.match(name)
    if not m or m.group(2) not in _BLOCK:
        raise KeyError(name)
    return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.weight"


def from_hf_key(name: str) -> str:
    back = {v: k for k, v in _FIXED.items()}
    if name in back:
        return back[name]
    m = _HF_BLOCK_RE.match(name)
    inverse = {v: k for k, v in _BLOCK.items()}
    if not m or m.group(2) not in inverse:
        raise KeyError(name)
    return f"blocks.{m.group(1)}.{inverse[m.group(2)]}.weight"


# ---------------------------------------------------------------------------------------------------- config
def hf_config(m: ModelConfig, dtype: torch.dtype, eos_id: int | None, pad_id: int | None) -> dict[str, Any]:
    """config.json for `m`: Olmo2 without sliding windows, Olmo3 with them. ConfigError if HF cannot hold it."""
    if not m.qk_norm:
        raise ConfigError("this model has no QK-norm; Hugging Face's Olmo2/Olmo3 classes always apply it, so it "
                          "cannot be exported")
    windows = {w for i in range(m.n_layers) if (w := m.window(i)) is not None}
    if len(windows) > 1:
        raise ConfigError(f"the sliding layers use different windows ({sorted(windows)}); Olmo3Config has one "
                          "sliding_window for all of them")
    cfg: dict[str, Any] = {
        "architectures": ["Olmo3ForCausalLM" if windows else "Olmo2ForCausalLM"],
        "model_type": "olmo3" if windows else "olmo2",
        "vocab_size": m.vocab_size, "hidden_size": m.d_model, "intermediate_size": m.mlp_hidden,
        "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads, "num_key_value_heads": m.n_kv,
        "head_dim": m.hd, "hidden_act": "silu", "max_position_embeddings": m.max_seq_len,
        "initializer_range": m.init_std, "rms_norm_eps": m.norm_eps, "rope_theta": m.rope_theta,
        "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "use_cache": True, "bos_token_id": None, "eos_token_id": eos_id, "pad_token_id": pad_id,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    if windows:
        cfg["sliding_window"] = windows.pop()
        cfg["layer_types"] = ["full_attention" if m.window(i) is None else "sliding_attention"
                              for i in range(m.n_layers)]
    return cfg


def _rope_theta(hf: dict[str, Any]) -> float:
    """rope_theta from a 4.x config (flat) or a 5.x one (rope_parameters, per layer type for Olmo 3)."""
    params = hf.get("rope_parameters") or {}
    if "full_attention" in params:
        params = params["full_attention"]
    scaling = hf.get("rope_scaling") or ({} if params.get("rope_type", "default") == "default" else params)
    if scaling:
        raise ConfigError(f"RoPE scaling ({scaling.get('rope_type') or scaling.get('type')}) is not supported by "
                          "olmo's model; import the model's pre-long-context checkpoint instead")
    return float(hf.get("rope_theta") or params.get("rope_theta") or 10_000.0)


def model_config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    kind = hf.get("model_type")
    if kind not in ("olmo2", "olmo3"):
        raise ConfigError(f"config.json has model_type '{kind}'; olmo imports OLMo 2 (olmo2) and OLMo 3 (olmo3) "
                          "models only")
    if hf.get("attention_bias") or hf.get("tie_word_embeddings"):
        raise ConfigError("attention biases and tied embeddings are not part of OLMo 2/3; this model cannot be "
                          "imported")
    n_layers, n_heads, d = hf["num_hidden_layers"], hf["num_attention_heads"], hf["hidden_size"]
    kv = hf.get("num_key_value_heads") or n_heads
    head_dim = hf.get("head_dim") or d // n_heads
    m = ModelConfig(d_model=d, n_layers=n_layers, n_heads=n_heads, n_kv_heads=None if kv == n_heads else kv,
                    head_dim=None if head_dim == d // n_heads else head_dim, mlp_hidden=hf["intermediate_size"],
                    vocab_size=hf["vocab_size"], max_seq_len=hf.get("max_position_embeddings") or 4096,
                    rope_theta=_rope_theta(hf), norm_eps=hf.get("rms_norm_eps", 1e-6),
                    init_std=hf.get("initializer_range", 0.02))
    if kind == "olmo3":
        types = hf.get("layer_types") or ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention"
                                          for i in range(n_layers)]
        w = int(hf.get("sliding_window") or 4096)
        # One entry per layer and no forced-full layers: window(i) is exactly layer_types[i].
        m.sliding_window = [w if t == "sliding_attention" else -1 for t in types]
        m.swa_full_first_layer = m.swa_full_last_layer = False
    return m


# ------------------------------------------------------------------------------------------------- tokenizer
TOKENIZER_JSON = "tokenizer.json"


@dataclass
class TokenizerFiles:
    path: Path  # tokenizer.json
    eos: str | None
    pad: str | None
    bos: str | None = None


def find_tokenizer(state: dict[str, Any], given: Path | None, ckpt: Path | None = None) -> TokenizerFiles:
    """`given`, else the tokenizer.json that travels inside the checkpoint (import-hf and train put it there),
    else the one the checkpoint's data was made with (its data manifest records path and hash); ConfigError when
    none is there."""
    from olmo.data.prepare import load_tokenizer
    from olmo.data.shards import ManifestError, load_manifest

    data = state.get("config", {}).get("data") if isinstance(state.get("config"), dict) else None
    paths = data.get("paths") if isinstance(data, dict) else None
    if given is None and ckpt is not None and (ckpt / TOKENIZER_JSON).is_file():
        given = ckpt / TOKENIZER_JSON
    if given is None:
        for p in paths if isinstance(paths, list) else []:
            try:
                manifest = load_manifest(Path(p)) if isinstance(p, str) and Path(p).is_dir() else None
            except ManifestError:  # a damaged manifest names no tokenizer; --tokenizer is asked for below
                manifest = None
            tok_path = manifest["tokenizer"].get("path") if manifest else None
            if manifest and isinstance(tok_path, str) and Path(tok_path).is_file():
                given = Path(tok_path)
                if load_tokenizer(given).sha256 != manifest["tokenizer"]["sha256"]:
                    raise ConfigError(f"{given} changed since the training data was tokenized with it; pass "
                                      "--tokenizer with the original tokenizer.json")
                break
    if given is None:
        raise ConfigError("cannot find the tokenizer this checkpoint was trained with (its data manifest is gone); "
                          "pass --tokenizer PATH/tokenizer.json")
    tok = load_tokenizer(given)
    from olmo.data.special_tokens import special_tokens

    found = special_tokens(tok.tokenizer, tok.path)
    return TokenizerFiles(tok.path, tok.tokenizer.id_to_token(tok.eos_id), found["pad"], found["bos"])


def _write_tokenizer(out: Path, tok: TokenizerFiles, max_len: int) -> tuple[int | None, int | None]:
    from tokenizers import Tokenizer

    shutil.copyfile(tok.path, out / "tokenizer.json")
    raw = Tokenizer.from_file(str(tok.path))
    conf = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len, "eos_token": tok.eos,
            "pad_token": tok.pad, "bos_token": tok.bos, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(conf, indent=2) + "\n")
    special = {k: v for k, v in (("bos_token", tok.bos), ("eos_token", tok.eos), ("pad_token", tok.pad)) if v}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    ids = (raw.token_to_id(tok.eos) if tok.eos else None, raw.token_to_id(tok.pad) if tok.pad else None)
    return ids


# ---------------------------------------------------------------------------------------------------- export
def _publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Put the finished `tmp` at `out` with renames only; an old `out` is moved aside first, then deleted."""
    mode = 0o666 & ~_umask()
    for p in tmp.iterdir():
        if p.is_file():
            os.chmod(p, mode)  # safetensors creates its files 0600; a model folder is meant to be shared
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(tmp)
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        if not overwrite:
            raise ConfigError(f"{out} already exists; pass --overwrite or choose another output directory")
        os.rename(out, old)
    os.rename(tmp, out)
    fsync_dir(out.parent)
    _remove(old)


def _remove(path: Path) -> None:
    """Delete a folder we moved aside or left behind; a symlink there (to another folder) loses only the link:
    rmtree refuses links, and what one points at is not ours to delete."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_dir(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    _remove(tmp)
    tmp.mkdir()
    return tmp


def _save_shards(weights: dict[str, torch.Tensor], out: Path, shard_bytes: int,
                 progress: Callable[[int], None] | None = None) -> None:
    """Safetensors files of at most `shard_bytes`; `progress(nbytes)` hears of each file's tensors once written."""
    from safetensors.torch import save_file

    def done(shard: dict[str, torch.Tensor]) -> None:
        if progress:
            progress(sum(t.nbytes for t in shard.values()))

    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in weights.items():
        if shards[-1] and size + t.nbytes > shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += t.nbytes
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata={"format": "pt"})
        done(shards[0])
        return
    index: dict[str, Any] = {"metadata": {"total_size": sum(t.nbytes for t in weights.values())}, "weight_map": {}}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        done(shard)
        index["weight_map"].update(dict.fromkeys(shard, fname))
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def export_hf(ckpt: Path, out: Path, tokenizer: Path | None = None, dtype: torch.dtype = torch.float32,
              overwrite: bool = False, shard_bytes: int = SHARD_BYTES,
              progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the checkpoint `ckpt` (or a run dir's latest) as a Hugging Face model folder at `out`.
    `progress(nbytes, total)` follows the weights written (total: all of them, in `dtype`)."""
    from olmo.recipe import from_dict

    path = checkpoint.resolve(ckpt)
    state = checkpoint.read_state(path)
    config = state.get("config")
    if checkpoint.is_olmo_core(path) and not (isinstance(config, dict) and isinstance(config.get("model"), dict)):
        raise ConfigError(f"{path} has no config.json saying the model's shape (OLMo-core's ConfigSaverCallback "
                          "writes one); start a run from it with `olmo train RECIPE --init-from` and export that")
    saved_model = checkpoint.saved_config(path, state)["model"]
    source = path / (checkpoint.TRAIN_STATE if (path / checkpoint.TRAIN_STATE).is_file() else "config.json")
    model_cfg = checked_model(from_dict({"model": saved_model}, str(source)).model, source)
    check_output_dir(out, "output folder")
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} already exists; pass --overwrite or choose another output directory")
    tok = find_tokenizer(state, tokenizer, path)
    problem = checkpoint.shape_mismatch(path, model_cfg)
    if problem:  # e.g. an edited config.json beside OLMo-core's weights: HF would load it wrongly or not at all
        raise ConfigError(f"{path}: the weights do not fit the model config ({problem})")
    weights = checkpoint.load_model_state(path, dtype)
    tmp = _temp_dir(out)
    try:
        eos_id, pad_id = _write_tokenizer(tmp, tok, model_cfg.max_seq_len)
        config = hf_config(model_cfg, dtype, eos_id, pad_id)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        gen = {"eos_token_id": eos_id, "pad_token_id": pad_id}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        total = sum(v.nbytes for v in weights.values())
        _save_shards({to_hf_key(k): v.contiguous() for k, v in weights.items()}, tmp, shard_bytes,
                     (lambda n: progress(n, total)) if progress else None)
        _publish(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


# ---------------------------------------------------------------------------------------------------- import
def _read_hf_weights(hf_dir: Path, progress: Callable[[int, int], None] | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors files; `progress(nbytes, total)` after each file is read."""
    from safetensors.torch import load_file

    index = hf_dir / "model.safetensors.index.json"
    files = sorted(set(_index_files(index))) if index.is_file() else ["model.safetensors"]
    if not all((hf_dir / f).is_file() for f in files):
        raise ConfigError(f"{hf_dir} has no safetensors weights ({', '.join(files)}); download them (e.g. "
                          "`hf download MODEL --local-dir DIR`) or convert .bin weights to safetensors first")
    weights: dict[str, torch.Tensor] = {}
    total = sum((hf_dir / f).stat().st_size for f in files)
    for f in files:
        try:
            weights.update(load_file(str(hf_dir / f)))
        except Exception as e:  # safetensors raises its own error type for a damaged or cut file
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)[:200]
            raise ConfigError(f"{hf_dir / f} is not a readable safetensors file ({first}); download it "
                              "again") from None
        if progress:
            progress((hf_dir / f).stat().st_size, total)
    return weights


def _index_files(index: Path) -> list[str]:
    """The weight files model.safetensors.index.json names: plain names inside the folder only."""
    try:
        weight_map = json.loads(read_small(index))["weight_map"]
        names = list(weight_map.values())
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"{index} is not a safetensors index (JSON with a weight_map); download it again") from None
    for n in names:
        if not isinstance(n, str) or not n or "/" in n or "\\" in n or n in (".", ".."):
            raise ConfigError(f"{index} names a weight file outside the model folder ({n!r}); it is not a "
                              "Hugging Face model index")
    return names


def _read_hf_config(conf: Path) -> ModelConfig:
    """config.json as a ModelConfig; ConfigError naming the file for anything that is not an OLMo 2/3 config."""
    try:
        raw = json.loads(read_small(conf))
    except OSError as e:
        raise ConfigError(f"{conf} cannot be read ({e.strerror})") from None
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply to parse
        raise ConfigError(f"{conf} is not valid JSON; download it again") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{conf} is not a JSON object; give a Hugging Face model folder")
    from olmo.config_numbers import MAX_LAYERS

    layers = raw.get("num_hidden_layers")
    if isinstance(layers, int) and layers > MAX_LAYERS:  # the per-layer lists below would not fit in memory
        raise ConfigError(f"{conf}: num_hidden_layers ({layers:,}) is more than olmo builds (at most {MAX_LAYERS:,})")
    try:
        model_cfg = model_config_from_hf(raw)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
        what = f"has no '{e.args[0]}'" if isinstance(e, KeyError) else "has a field of the wrong type"
        raise ConfigError(f"{conf} {what}; it is not a complete OLMo 2/3 config") from None
    import dataclasses

    from olmo.recipe import from_dict

    # through the recipe loader, so every field gets its declared type (or a message naming it), then the
    # checks any recipe gets
    return checked_model(from_dict({"model": dataclasses.asdict(model_cfg)}, str(conf)).model, conf)


def checked_model(model_cfg: ModelConfig, source: Path) -> ModelConfig:
    """`model_cfg` (read from `source`, a file of data) after the checks any recipe's model gets, so a damaged
    or hostile shape is refused before a tensor is sized from it."""
    from olmo.config import validate

    try:
        validate(TrainConfig(model=model_cfg, data=DataConfig(seq_len=min(64, model_cfg.max_seq_len)),
                             global_batch_size=1, micro_batch_size=1))
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return model_cfg


def import_hf(hf_dir: Path, out: Path, overwrite: bool = False,
              progress: Callable[[int, int], None] | None = None) -> tuple[Path, ModelConfig]:
    """Turn a Hugging Face OLMo 2/3 folder into a weights-only checkpoint at `out` (fp32 master weights), with
    its tokenizer.json and a recipe.yaml that fine-tunes from it (`init_from` set)."""
    from olmo.model import Transformer
    from olmo.recipe import to_yaml

    conf = hf_dir / "config.json"
    if not conf.is_file():
        raise ConfigError(f"{hf_dir} has no config.json; give a Hugging Face model folder")
    model_cfg = _read_hf_config(conf)
    check_output_dir(out, "output checkpoint")
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} already exists; pass --overwrite or choose another output directory")
    with torch.device("meta"):
        expected = {k: v.shape for k, v in Transformer(model_cfg).state_dict().items()}
    weights: dict[str, torch.Tensor] = {}
    for name, t in _read_hf_weights(hf_dir, progress).items():
        if name.endswith("rotary_emb.inv_freq"):  # a buffer some older exports carry; recomputed from rope_theta
            continue
        try:
            ours = from_hf_key(name)
        except KeyError:
            raise ConfigError(f"{hf_dir}: unexpected weight '{name}'; not an OLMo 2/3 checkpoint") from None
        if ours not in expected or tuple(t.shape) != tuple(expected[ours]):
            raise ConfigError(f"{hf_dir}: weight '{name}' has shape {tuple(t.shape)}, config.json implies "
                              f"{tuple(expected.get(ours, ()))}")
        weights[ours] = t.to(torch.float32).contiguous()
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ConfigError(f"{hf_dir} is missing {len(missing)} weight(s), e.g. {to_hf_key(missing[0])}")
    cfg = TrainConfig(model=model_cfg, init_from=str(out.resolve()), run_dir=f"runs/{out.name}-ft",
                      data=DataConfig(seq_len=min(4096, model_cfg.max_seq_len)),
                      optim=OptimConfig(lr=1e-5, warmup_steps=100, schedule="linear", final_lr_ratio=0.0),
                      steps=1000, save_interval=250)
    tok = out / "tokenizer.json" if (hf_dir / "tokenizer.json").is_file() else "MODEL_TOKENIZER.json"
    recipe = (f"# Fine-tune {hf_dir.name} (written by olmo import-hf). lr 1e-5 with a linear decay is a cautious\n"
              f"# starting point, not a tuned value. Tokenize your data with the model's own tokenizer:\n"
              f"#   olmo prepare-data -i docs.jsonl -o data/ft -t {tok}\n"
              f"#   olmo train {out / 'recipe.yaml'} --set data.paths=[data/ft]\n" + to_yaml(cfg))
    extra = {"recipe.yaml": recipe.encode()}
    from olmo.data import tokenizer_files
    extra.update(tokenizer_files.from_dir(hf_dir))  # tokenizer.json with the tokenizer_config.json naming its tokens
    from olmo.recipe import config_to_dict

    state = {"step": 0, "tokens_seen": 0, "world_size": 1, "config": config_to_dict(cfg), "source": str(hf_dir)}
    checkpoint.save_weights(out, weights, state, extra, overwrite)
    return out, model_cfg
