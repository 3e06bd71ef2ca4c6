"""Hugging Face conversion: our checkpoints <-> transformers' `Olmo2ForCausalLM` / `Olmo3ForCausalLM` folders.

    olmo export-hf runs/olmo/checkpoints/step1000 hf/my-olmo     # config.json + safetensors + tokenizer
    olmo import-hf hf/OLMo-2-0425-1B ckpt/olmo2-1b                   # a weights-only checkpoint + recipe.yaml

Our parameter names are OLMo-core's, and the key map is OLMo-core's `nn/hf/convert.py`: the OLMo 2 block's
post-norms are `post_attention_layernorm` (our `attention_norm`) and `post_feedforward_layernorm` (our
`feed_forward_norm`), and the head's norm is the model's final `norm`. A model
with sliding-window layers is exported as Olmo 3 (`layer_types` names each layer; `sliding_window` counts the
tokens a query sees, itself included, which is our convention too). Nothing here needs the network or
transformers itself: config.json is written from our config (the flat `rope_theta` form released OLMo
checkpoints use, which transformers 4.x and 5.x both read), the weights with `safetensors`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from olmo import checkpoint, outputs
from olmo.config import ConfigError, DataConfig, ModelConfig, OptimConfig, TrainConfig
from olmo.errors import OlmoError, is_disk_full
from olmo.fsutil import check_local, check_output_dir, fsync_dir, gigabytes, inside_folder, mount_of, read_small
from olmo.interop.hf_config import from_hf_key, hf_config, model_config_from_hf, to_hf_key
from olmo.progress import watch_folder
from olmo_common.atomic import shared_mode
from olmo_common.bounded.data import load_json, shown

SHARD_BYTES = 5 * 1024**3  # safetensors files of at most 5 GiB, as Hugging Face's save_pretrained default


def fine_tune_commands(checkpoint_dir: Path, tokenizer: Path | None) -> list[str]:
    """The two commands import-hf suggests, pasteable whatever the paths hold (spaces, quotes, brackets)."""
    from olmo.hints import command, set_arg

    tok = command(tokenizer) if tokenizer is not None else "MODEL/tokenizer.json"
    train = command("olmo", "train", checkpoint_dir / "recipe.yaml")
    return [_one_line(f"olmo prepare-data -i docs.jsonl -o data/ft -t {tok}"),
            _one_line(f"{train} {set_arg('data.paths', ['data/ft'])}")]


def _one_line(text: str) -> str:
    """A line break in a folder name would end a recipe comment and turn the rest into YAML: never let it."""
    return "".join(c if c.isprintable() else "?" for c in text)


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
    from olmo.data.special_tokens import special_tokens

    if given is None and ckpt is not None and (ckpt / TOKENIZER_JSON).is_file():
        given = ckpt / TOKENIZER_JSON
    given = given or _tokenizer_of_the_data(state)  # a Path is never false
    if given is None:
        raise ConfigError("cannot find the tokenizer this checkpoint was trained with (its data manifest is gone); "
                          "pass --tokenizer PATH/tokenizer.json")
    tok = load_tokenizer(given)
    found = special_tokens(tok.tokenizer, tok.path)
    return TokenizerFiles(tok.path, tok.tokenizer.id_to_token(tok.eos_id), found["pad"], found["bos"])


def _tokenizer_of_the_data(state: dict[str, Any]) -> Path | None:
    """The tokenizer.json the first data folder's manifest names, when it is still there; ConfigError when it
    changed since the data was tokenized with it."""
    from olmo.data.prepare import load_tokenizer
    from olmo.data.shards import ManifestError, load_manifest

    data = state.get("config", {}).get("data") if isinstance(state.get("config"), dict) else None
    paths = data.get("paths") if isinstance(data, dict) else None
    for p in paths if isinstance(paths, list) else []:
        try:
            manifest = load_manifest(Path(p)) if isinstance(p, str) and Path(p).is_dir() else None
        except ManifestError:  # a damaged manifest names no tokenizer; --tokenizer is asked for instead
            manifest = None
        tok_path = manifest["tokenizer"].get("path") if manifest else None
        if manifest and isinstance(tok_path, str) and Path(tok_path).is_file():
            if load_tokenizer(Path(tok_path)).sha256 != manifest["tokenizer"]["sha256"]:
                raise ConfigError(f"{tok_path} changed since the training data was tokenized with it; pass "
                                  "--tokenizer with the original tokenizer.json")
            return Path(tok_path)
    return None


def _write_tokenizer(out: Path, tok: TokenizerFiles, max_len: int) -> tuple[int | None, int | None]:
    from tokenizers import Tokenizer

    shutil.copyfile(tok.path, out / "tokenizer.json")
    raw = Tokenizer.from_str(read_small(tok.path, "tokenizer").decode("utf-8"))  # bounded, as load_tokenizer read it
    conf = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len, "eos_token": tok.eos,
            "pad_token": tok.pad, "bos_token": tok.bos, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(conf, indent=2) + "\n")
    special = {k: v for k, v in (("bos_token", tok.bos), ("eos_token", tok.eos), ("pad_token", tok.pad)) if v}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    ids = (raw.token_to_id(tok.eos) if tok.eos else None, raw.token_to_id(tok.pad) if tok.pad else None)
    return ids


# ---------------------------------------------------------------------------------------------------- export
def _share(tmp: Path) -> None:
    """Make the finished files readable as a plain write would (safetensors creates them 0600; a model folder is
    meant to be shared) and durable before the folder is renamed into place."""
    mode = shared_mode()
    for p in tmp.iterdir():
        if p.is_file() and not p.is_symlink():
            os.chmod(p, mode)
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(tmp)


@contextlib.contextmanager
def _building(target: outputs.Claim, overwrite: bool, needed: int) -> Iterator[Path]:
    """A temp folder beside the output to write into; published (swapped in by renames) when the block ends
    without error, else removed, leaving any earlier output as it was. A full disk is one line saying so."""
    tmp = outputs.new_temp(target)
    try:
        yield tmp
        _share(tmp)
        outputs.publish(target, tmp, overwrite)
    except BaseException as e:
        outputs.discard(tmp)
        if is_disk_full(e):
            raise OlmoError(f"no space left on {mount_of(target.out.parent)} (needs about {gigabytes(needed)}) "
                            f"while writing {target.out}; nothing was changed there and the partial output was "
                            "removed: free space and run it again") from None
        raise


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
    check_local(out, "OUT_DIR")
    check_output_dir(out, "output folder")
    target = outputs.claim(out, "export-hf")
    outputs.require_overwrite(target, overwrite)
    tok = find_tokenizer(state, tokenizer, path)
    problem = checkpoint.shape_mismatch(path, model_cfg)
    if problem:  # e.g. an edited config.json beside OLMo-core's weights: HF would load it wrongly or not at all
        raise ConfigError(f"{path}: the weights do not fit the model config ({problem})")
    weights = checkpoint.load_model_state(path, dtype)
    total = sum(v.nbytes for v in weights.values())
    with _building(target, overwrite, total + tok.path.stat().st_size) as tmp:
        eos_id, pad_id = _write_tokenizer(tmp, tok, model_cfg.max_seq_len)
        config = hf_config(model_cfg, dtype, eos_id, pad_id)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        gen = {"eos_token_id": eos_id, "pad_token_id": pad_id}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        _save_shards({to_hf_key(k): v.contiguous() for k, v in weights.items()}, tmp, shard_bytes,
                     (lambda n: progress(n, total)) if progress else None)
    return out


# ---------------------------------------------------------------------------------------------------- import
def _read_hf_weights(hf_dir: Path, progress: Callable[[int, int], None] | None = None,
                     expected: dict[str, tuple[int, ...]] | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors files; `progress(nbytes, total)` after each file is read. With
    `expected` (olmo's names -> shapes), each file's header is checked against it before a byte of it is read:
    a header may declare a tensor of any size (a sparse file of terabytes), and reading it would cost that."""
    from safetensors.torch import load_file

    index = hf_dir / "model.safetensors.index.json"
    files = sorted(set(_index_files(index))) if index.is_file() else ["model.safetensors"]
    for f in [*(["model.safetensors.index.json"] if index.is_file() else []), *files]:
        own_file(hf_dir, f)
    if not all((hf_dir / f).is_file() for f in files):
        raise ConfigError(f"{hf_dir} has no safetensors weights ({', '.join(files)}); download them (e.g. "
                          "`hf download MODEL --local-dir DIR`) or convert .bin weights to safetensors first")
    weights: dict[str, torch.Tensor] = {}
    total = sum((hf_dir / f).stat().st_size for f in files)
    for f in files:
        try:
            if expected is not None:
                _check_declared(hf_dir, f, expected)
            weights.update(load_file(str(hf_dir / f)))
        except ConfigError:
            raise
        except Exception as e:  # safetensors raises its own error type for a damaged or cut file
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)[:200]
            raise ConfigError(f"{hf_dir / f} is not a readable safetensors file ({first}); download it "
                              "again") from None
        if progress:
            progress((hf_dir / f).stat().st_size, total)
    return weights


def _check_weight(hf_dir: Path, name: str, shape: tuple[int, ...], expected: dict[str, tuple[int, ...]]) -> bool:
    """Whether HF weight `name` of `shape` is one olmo keeps (False: a buffer recomputed on load); ConfigError
    for a weight olmo has no place for or one of another shape than config.json implies."""
    if name.endswith("rotary_emb.inv_freq"):  # a buffer some older exports carry; recomputed from rope_theta
        return False
    try:
        ours = from_hf_key(name)
    except KeyError:
        raise ConfigError(f"{hf_dir}: unexpected weight '{name}'; not an OLMo 2/3 checkpoint") from None
    if ours not in expected or shape != tuple(expected[ours]):
        raise ConfigError(f"{hf_dir}: weight '{name}' has shape {shape}, config.json implies "
                          f"{tuple(expected.get(ours, ()))}")
    return True


def _check_declared(hf_dir: Path, f: str, expected: dict[str, tuple[int, ...]]) -> None:
    """Every tensor the header of safetensors file `f` declares, checked by name and shape (nothing read)."""
    from safetensors import safe_open

    with safe_open(str(hf_dir / f), "pt") as st:
        for name in st.keys():  # noqa: SIM118 - safe_open is not a mapping
            _check_weight(hf_dir, name, tuple(st.get_slice(name).get_shape()), expected)


def own_file(folder: Path, name: str) -> None:
    """ConfigError when `folder/name` is a symlink leading out of the model folder (to any file the user can read):
    import-hf reads only the folder's own files (and the Hugging Face cache's snapshot -> blob links)."""
    path = folder / name
    if os.path.lexists(path) and not inside_folder(path, folder):
        raise ConfigError(f"{path} is a link to a file outside {folder}; import-hf reads only the model folder's own "
                          "files: copy the file into the folder instead of linking it")


def _index_files(index: Path) -> list[str]:
    """The weight files model.safetensors.index.json names: plain names inside the folder only."""
    try:
        weight_map = load_json(index, "model config")["weight_map"]
        names = list(weight_map.values())
    except OSError as e:
        raise ConfigError(f"{index} cannot be read ({e.strerror})") from None
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"{index} is not a safetensors index (JSON with a weight_map); download it again") from None
    for n in names:
        if not isinstance(n, str) or not n or "/" in n or "\\" in n or n in (".", ".."):
            raise ConfigError(f"{index} names a weight file outside the model folder ({shown(n)}); it is not a "
                              "Hugging Face model index")
    return names


def _read_hf_config(conf: Path) -> ModelConfig:
    """config.json as a ModelConfig; ConfigError naming the file for anything that is not an OLMo 2/3 config."""
    try:
        raw = load_json(conf, "model config")
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


def _check_tokenizer(hf_dir: Path, data: bytes | None) -> None:
    """ConfigError unless `data` (the folder's tokenizer.json, copied into the checkpoint) is a tokenizer."""
    if data is None:
        return
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(data.decode())
    except Exception as e:  # tokenizers raises its own Exception type; bytes that are not UTF-8 raise ValueError
        first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)[:200]
        raise ConfigError(f"{hf_dir / 'tokenizer.json'} is not a Hugging Face tokenizer file ({first}); download "
                          "it again") from None


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
    own_file(hf_dir, "config.json")
    model_cfg = _read_hf_config(conf)
    check_local(out, "OUT_CHECKPOINT")
    check_output_dir(out, "output checkpoint")
    target = outputs.claim(out, "import-hf")
    outputs.require_overwrite(target, overwrite)
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in Transformer(model_cfg).state_dict().items()}
    weights: dict[str, torch.Tensor] = {}
    # one bar for the read and the write: the total is the files read plus the fp32 weights written
    total = [sum(math.prod(s) * 4 for s in expected.values())]
    written = total[0]

    def advance(n: int, read_total: int | None = None) -> None:
        if read_total is not None:
            total[0] = read_total + written
        if progress:
            progress(n, total[0])

    for name, t in _read_hf_weights(hf_dir, advance, expected).items():
        if _check_weight(hf_dir, name, tuple(t.shape), expected):
            weights[from_hf_key(name)] = t.to(torch.float32).contiguous()
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise ConfigError(f"{hf_dir} is missing {len(missing)} weight(s), e.g. {to_hf_key(missing[0])}")
    cfg = TrainConfig(model=model_cfg, init_from=str(out.resolve()), run_dir=f"runs/{out.name}-ft",
                      data=DataConfig(seq_len=min(4096, model_cfg.max_seq_len)),
                      optim=OptimConfig(lr=1e-5, warmup_steps=100, schedule="linear", final_lr_ratio=0.0),
                      steps=1000, save_interval=250)
    tok = out / "tokenizer.json" if (hf_dir / "tokenizer.json").is_file() else None
    steps = "".join(f"#   {line}\n" for line in fine_tune_commands(out, tok))
    recipe = (f"# Fine-tune {_one_line(hf_dir.name)} (written by olmo import-hf). lr 1e-5 with a linear decay is a "
              "cautious\n# starting point, not a tuned value. Tokenize your data with the model's own tokenizer:\n"
              + steps + to_yaml(cfg))
    extra = {"recipe.yaml": recipe.encode()}
    from olmo.data import tokenizer_files
    extra.update(tokenizer_files.from_dir(hf_dir))  # tokenizer.json with the tokenizer_config.json naming its tokens
    _check_tokenizer(hf_dir, extra.get(tokenizer_files.TOKENIZER_JSON))
    from olmo.recipe import config_to_dict

    state = {"step": 0, "tokens_seen": 0, "world_size": 1, "config": config_to_dict(cfg), "source": str(hf_dir)}
    needed = sum(t.nbytes for t in weights.values()) + sum(map(len, extra.values()))
    with _building(target, overwrite, needed) as tmp, watch_folder((tmp,), advance):
        checkpoint.write_weights(tmp, weights, state, extra)
    return out, model_cfg
