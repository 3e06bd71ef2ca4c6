"""Hugging Face export/import: transformers loads our export and computes the same logits; import is exact.

Everything is offline: the checkpoint is made here, the tokenizer is the bundled one (found through the data
manifest, as for a real run), and transformers reads the folder from disk. fp32 on the CPU; the bound is
max |logits diff| <= 1e-4 (measured: 0, the two implementations do the same fp32 operations in the same order).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import transformers  # in the dev extras: CI has it, so a missing one fails loudly instead of skipping

from olmo import checkpoint
from olmo.config import DataConfig, ModelConfig, TrainConfig
from olmo.interop.hf import export_hf
from olmo.model import Transformer
from olmo.recipe import config_to_dict, load_recipe
from olmo.train import train


def _model_cfg(sliding: bool) -> ModelConfig:
    return ModelConfig(d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, mlp_hidden=128, vocab_size=768,
                       max_seq_len=128, sliding_window=[16, -1] if sliding else None)


def _checkpoint(tmp: Path, data: Path, sliding: bool) -> tuple[Path, Transformer]:
    """A weights-only checkpoint whose every tensor is random, norms included: with norms at their initial 1.0
    a swapped norm mapping would go unnoticed."""
    model = Transformer(_model_cfg(sliding))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (1.0 if p.dim() == 1 else 0.0))
    cfg = TrainConfig(model=model.cfg, data=DataConfig(paths=[str(data)]))
    path = tmp / "ckpt"
    checkpoint.save_weights(path, model.state_dict(), {"step": 0, "config": config_to_dict(cfg)})
    return path, model.eval()


@pytest.mark.parametrize("sliding", [False, True], ids=["olmo2", "olmo3-swa"])
def test_export_loads_in_transformers_with_the_same_logits(
    sliding: bool, tiny_data: Path, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    ckpt, ours = _checkpoint(tmp_path, tiny_data, sliding)
    code, out, err = cli("export-hf", str(ckpt), str(tmp_path / "hf"))
    assert code == 0, err
    kind = "Olmo3ForCausalLM" if sliding else "Olmo2ForCausalLM"
    assert f"wrote {kind}" in out
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    assert type(theirs).__name__ == kind
    ids = torch.randint(0, 768, (2, 96), generator=torch.Generator().manual_seed(1))  # longer than the window
    with torch.no_grad():
        diff = (ours(ids) - theirs(ids).logits).abs().max().item()
        assert diff <= 1e-4, diff
        if sliding:  # the window really is applied on both sides: without it the logits move a lot
            full = Transformer(_model_cfg(False))
            full.load_state_dict(ours.state_dict())
            assert (full(ids) - theirs(ids).logits).abs().max().item() > 1e-2

    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    from olmo.data.prepare import load_tokenizer

    bundled = load_tokenizer(Path("bundled"))
    assert tok("the model trains")["input_ids"] == bundled.encode(["the model trains"])[0]
    assert tok.eos_token_id == bundled.eos_id == theirs.config.eos_token_id

    code, _, err = cli("export-hf", str(ckpt), str(tmp_path / "hf"))  # never clobbered silently
    assert code == 2 and "pass --overwrite" in err


def test_import_round_trip_is_exact_and_fine_tunes(tiny_data: Path, tmp_path: Path,
                                                   cli: Callable[..., tuple[int, str, str]]) -> None:
    ckpt, ours = _checkpoint(tmp_path, tiny_data, sliding=True)
    export_hf(ckpt, tmp_path / "hf", shard_bytes=300_000)  # several safetensors files plus an index
    assert json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())["weight_map"]
    code, out, err = cli("import-hf", str(tmp_path / "hf"), str(tmp_path / "imported"))
    assert code == 0, err and "olmo train" in out
    back = checkpoint.load_model_state(tmp_path / "imported")
    original = ours.state_dict()
    assert set(back) == set(original) and all(torch.equal(back[k], original[k]) for k in original)

    cfg = load_recipe(str(tmp_path / "imported" / "recipe.yaml"),
                      [f"data.paths=[{tiny_data}]", f"run_dir={tmp_path / 'ft'}", "data.seq_len=64", "steps=2",
                       "global_batch_size=4", "micro_batch_size=4", "device=cpu", "optim.warmup_steps=1"])
    assert [cfg.model.window(i) for i in range(4)] == [ours.cfg.window(i) for i in range(4)]
    assert cfg.init_from == str((tmp_path / "imported").resolve())
    res = train(cfg)
    assert res.step == 2 and all(torch.isfinite(torch.tensor(res.losses)))


def test_bad_inputs_are_one_line_usage_errors(tiny_data: Path, tmp_path: Path,
                                              cli: Callable[..., tuple[int, str, str]]) -> None:
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    code, _, err = cli("import-hf", str(tmp_path / "llama"), str(tmp_path / "out"))
    assert code == 2 and "imports OLMo 2 (olmo2) and OLMo 3 (olmo3) models only" in err
    assert not (tmp_path / "out").exists()

    model = Transformer(_model_cfg(False))
    cfg = TrainConfig(model=model.cfg, data=DataConfig(paths=[str(tmp_path / "gone")]))
    checkpoint.save_weights(tmp_path / "ck", model.state_dict(), {"step": 0, "config": config_to_dict(cfg)})
    code, _, err = cli("export-hf", str(tmp_path / "ck"), str(tmp_path / "hf"))
    assert code == 2 and "pass --tokenizer" in err and not (tmp_path / "hf").exists()
    code, _, err = cli("export-hf", str(tmp_path / "ck"), str(tmp_path / "hf"), "--tokenizer", "bundled")
    assert code == 0, err
    code, _, err = cli("export-hf", str(tmp_path / "nothing"), str(tmp_path / "hf2"))
    assert code == 2 and "is not a checkpoint" in err
