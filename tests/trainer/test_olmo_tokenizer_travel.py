"""Tokenizer files travel with checkpoints (import -> train -> export), and the manifest records BOS/EOS/pad."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from olmo import checkpoint
from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH

Cli = Callable[..., tuple[int, str, str]]


def _tokenizer_with_bos(tmp: Path) -> Path:
    """The bundled tokenizer plus a `<s>` token, in a folder of its own."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.add_special_tokens([AddedToken("<s>", special=True)])
    (tmp / "tok").mkdir()
    tok.save(str(tmp / "tok" / "tokenizer.json"))
    return tmp / "tok" / "tokenizer.json"


def test_manifest_records_bos_eos_and_pad_ids(tmp_path: Path, cli: Cli) -> None:
    from tokenizers import Tokenizer

    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "plain"), "-t", "bundled")
    assert code == 0, err
    m = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    bundled = Tokenizer.from_file(str(TOKENIZER_PATH))
    assert (m["bos_id"], m["eos_id"], m["pad_id"]) == (None, 0, bundled.token_to_id("<|pad|>"))

    path = _tokenizer_with_bos(tmp_path)
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "bos"), "-t", str(path))
    assert code == 0, err
    m = json.loads((tmp_path / "bos" / "manifest.json").read_text())
    assert m["bos_id"] == Tokenizer.from_file(str(path)).token_to_id("<s>") and m["bos_id"] is not None

    # a tokenizer_config.json beside it is the authority (here: <|endoftext|> pads, and there is no BOS)
    (path.parent / "tokenizer_config.json").write_text(json.dumps({"pad_token": {"content": "<|endoftext|>"},
                                                                   "bos_token": None}))
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "conf"), "-t", str(path))
    m = json.loads((tmp_path / "conf" / "manifest.json").read_text())
    assert code == 0 and m["pad_id"] == 0 and m["bos_id"] is None, err


def test_tokenizer_travels_through_import_train_and_export(tmp_path: Path, cli: Cli) -> None:
    # data tokenized with a copy of the tokenizer that is then deleted: only the travelling copy is left
    tok = _tokenizer_with_bos(tmp_path)
    (tok.parent / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "<|endoftext|>",
                                                                   "pad_token": "<|pad|>"}))
    code, _, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "d"), "-t", str(tok))
    assert code == 0, err
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {d_model: 32, n_layers: 2, n_heads: 4, mlp_hidden: 64, vocab_size: 768, max_seq_len: 64}"
                      f"\ndata: {{paths: [{tmp_path / 'd'}], seq_len: 32, val_fraction: 0.05}}\n"
                      f"run_dir: {tmp_path / 'run'}\ndevice: cpu\nglobal_batch_size: 4\nmicro_batch_size: 4\n"
                      "steps: 1\neval_batches: 1\n")
    code, _, err = cli("train", str(recipe), "--skip-doctor")
    assert code == 0, err
    ckpt = checkpoint.latest(tmp_path / "run")
    assert ckpt is not None and (ckpt / "tokenizer.json").read_bytes() == tok.read_bytes()
    assert checkpoint.verify(ckpt) is None  # the copies are part of the checkpoint's recorded files
    shutil.rmtree(tok.parent)

    code, _, err = cli("export-hf", str(tmp_path / "run"), str(tmp_path / "hf"))
    assert code == 0, err
    conf = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert conf["bos_token"] == "<s>" and conf["pad_token"] == "<|pad|>" and conf["eos_token"] == "<|endoftext|>"

    # import-hf keeps tokenizer.json + tokenizer_config.json; export of the import uses them, not a guess
    code, _, err = cli("import-hf", str(tmp_path / "hf"), str(tmp_path / "imp"))
    assert code == 0, err
    assert (tmp_path / "imp" / "tokenizer_config.json").is_file()
    code, _, err = cli("export-hf", str(tmp_path / "imp"), str(tmp_path / "hf2"))
    assert code == 0, err
    assert (tmp_path / "hf2" / "tokenizer.json").read_bytes() == (tmp_path / "hf" / "tokenizer.json").read_bytes()


def test_import_without_tokenizer_points_at_nothing_it_did_not_write(tmp_path: Path, cli: Cli) -> None:
    import torch

    from olmo.config import DataConfig, ModelConfig, TrainConfig
    from olmo.interop.hf import export_hf
    from olmo.model import Transformer
    from olmo.recipe import config_to_dict

    model = Transformer(ModelConfig(d_model=32, n_layers=1, n_heads=4, mlp_hidden=64, vocab_size=768))
    cfg = TrainConfig(model=model.cfg, data=DataConfig(paths=[]))
    checkpoint.save_weights(tmp_path / "c", model.state_dict(), {"step": 0, "config": config_to_dict(cfg)})
    export_hf(tmp_path / "c", tmp_path / "hf", tokenizer=TOKENIZER_PATH, dtype=torch.float32)
    (tmp_path / "hf" / "tokenizer.json").unlink()
    code, out, err = cli("import-hf", str(tmp_path / "hf"), str(tmp_path / "imp"))
    assert code == 0 and "has no tokenizer.json" in err, err
    assert str(tmp_path / "imp" / "tokenizer.json") not in out + (tmp_path / "imp" / "recipe.yaml").read_text()
    assert not (tmp_path / "imp" / "tokenizer.json").exists()
