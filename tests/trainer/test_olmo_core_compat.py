"""OLMo-core checkpoints through `olmo`, and ours through OLMo-core, with the real ai2-olmo-core package.

The OLMo-core checkpoint is written BY OLMo-core here (its TransformerConfig, its save_model_and_optim_state,
in the save-folder layout its Checkpointer uses, with the config.json its ConfigSaverCallback writes). Round
trip: `olmo train --init-from` it -> 2 steps -> `olmo export-hf` -> transformers' logits equal OLMo-core's own
forward (with our trained checkpoint loaded by OLMo-core's loader) within 1e-5 in fp32. ai2-olmo-core is in
the `olmo-core` extra (not `dev`: it brings boto3, google-cloud-storage, pandas); without it the round trip
skips and the name-table tests still run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import require_olmo_core

from olmo import checkpoint
from olmo.data.corpus import TOKENIZER_PATH
from olmo.interop import olmo_core as core
from olmo.interop.core_options import UnsupportedOption
from olmo.recipe import load_recipe


def test_name_table_round_trips_and_rejects_strangers() -> None:
    for name in ("embeddings.weight", "blocks.11.attention.q_norm.weight", "lm_head.w_out.weight"):
        assert core.to_ours(core.to_core(name)) == name
    assert core.to_ours("blocks.3.feed_forward.w2.weight") == "blocks.3.feed_forward.w2.weight"
    with pytest.raises(KeyError):
        core.to_ours("blocks.0.attention.w_qkv.weight")
    with pytest.raises(KeyError):
        core.to_ours("blocks.x.attention.w_q.weight")


def test_olmo_core_model_config_translates_and_refuses_other_models() -> None:
    conf = {"d_model": 64, "n_layers": 3, "vocab_size": 768, "init_std": 0.02,
            "block": {"name": "reordered_norm", "layer_norm": {"eps": 1e-5},
                      "sequence_mixer": {"n_heads": 4, "n_kv_heads": 2, "head_dim": 8, "rope": {"theta": 10000},
                                         "qk_norm": {"name": "rms"},
                                         "sliding_window": {"pattern": [32, -1],
                                                            "force_full_attention_on_first_layer": False}},
                      "feed_forward": {"hidden_size": 96}}}
    got = core.model_config_dict(conf)
    assert got == {"d_model": 64, "n_layers": 3, "vocab_size": 768, "n_heads": 4, "qk_norm": True, "n_kv_heads": 2,
                   "head_dim": 8, "mlp_hidden": 96, "rope_theta": 10000, "norm_eps": 1e-5,
                   "sliding_window": [32, -1], "swa_full_first_layer": False, "swa_full_last_layer": True}
    for bad in ({"block": {"name": "moe"}}, {"tie_word_embeddings": True}, {"block": {"feed_forward": {"bias": True}}},
                {"block": {"layer_norm": {"name": "layer_norm"}}}, {"block": "x"},
                {"block": {"sequence_mixer": {"rope": {"name": "yarn"}}}}, {"d_model": "64"},
                {"block": {"sequence_mixer": {"sliding_window": {"window": 3}}}}):
        with pytest.raises((ValueError, UnsupportedOption)):
            core.model_config_dict({**conf, **bad})


def test_our_checkpoint_folders_use_olmo_core_naming(tmp_path: Path) -> None:
    assert checkpoint.step_dir_name(20) == "step20"
    assert core.STEP_RE.match(checkpoint.step_dir_name(7))
    root = tmp_path / checkpoint.CHECKPOINTS
    for name in ("step-000005", "step12"):  # an older olmo's name still counts
        (root / name).mkdir(parents=True)
        (root / name / checkpoint.TRAIN_STATE).write_text("{}")
    assert [p.name for p in checkpoint.complete_checkpoints(tmp_path)] == ["step-000005", "step12"]


def test_a_damaged_olmo_core_config_is_one_line(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    ck = tmp_path / "save" / "step3"
    (ck / core.MODEL_AND_OPTIM).mkdir(parents=True)
    (ck / core.MODEL_AND_OPTIM / ".metadata").write_bytes(b"x")
    (ck / core.CONFIG_JSON).write_text("{not json")
    assert checkpoint.resolve(tmp_path / "save") == ck
    code, _, err = cli("export-hf", str(tmp_path / "save"), str(tmp_path / "hf"))
    assert code == 2 and "config.json is not JSON" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("garbage", [b"", b"x" * 7, b"\x80\x04\x95junk"], ids=["empty", "text", "truncated"])
def test_damaged_olmo_core_metadata_is_one_line(garbage: bytes, tmp_path: Path,
                                                cli: Callable[..., tuple[int, str, str]]) -> None:
    ck = tmp_path / "step1"
    (ck / core.MODEL_AND_OPTIM).mkdir(parents=True)
    (ck / core.MODEL_AND_OPTIM / ".metadata").write_bytes(garbage)
    (ck / core.CONFIG_JSON).write_text(json.dumps({"model": {"d_model": 32, "n_layers": 1, "vocab_size": 768}}))
    code, _, err = cli("export-hf", str(ck), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 2 and ".metadata is damaged" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
def test_olmo_core_checkpoint_round_trips_through_olmo(
    tiny_data: Path, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    require_olmo_core()
    import transformers
    from olmo_core.distributed.checkpoint import load_model_and_optim_state, save_model_and_optim_state
    from olmo_core.nn.transformer import TransformerConfig
    from olmo_core.train.checkpoint import Checkpointer

    # 1. OLMo-core writes a checkpoint of its own OLMo 2 model, with every tensor random (norms too)
    oc_cfg = TransformerConfig.olmo2_1M(vocab_size=768)  # d_model 12, 4 layers, 4 heads of 4, hidden 256
    oc_model = oc_cfg.build(init_device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in oc_model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (1.0 if p.dim() == 1 else 0.0))
    save = tmp_path / "oc-save"
    step_dir = save / Checkpointer.checkpoint_dirname(100)
    save_model_and_optim_state(step_dir / core.MODEL_AND_OPTIM, oc_model)
    (step_dir / core.CONFIG_JSON).write_text(json.dumps({"model": oc_cfg.as_config_dict()}))
    (step_dir / "tokenizer.json").write_bytes(TOKENIZER_PATH.read_bytes())  # travels to the export

    # 2. olmo: a recipe with the same model written by hand (not through our translation), init-from, 2 steps
    recipe = tmp_path / "ft.yaml"
    recipe.write_text(
        "model: {d_model: 12, n_layers: 4, n_heads: 4, head_dim: 4, mlp_hidden: 256, vocab_size: 768, "
        "max_seq_len: 64, attn_backend: sdpa}\n"
        f"data: {{paths: [{tiny_data}], seq_len: 32, val_fraction: 0.05}}\n"
        f"run_dir: {tmp_path / 'run'}\nsteps: 2\nglobal_batch_size: 4\nmicro_batch_size: 4\ndevice: cpu\n"
        "save_interval: 2\neval_batches: 1\noptim: {lr: 1.0e-3, warmup_steps: 1}\n")
    code, out, err = cli("train", str(recipe), "--init-from", str(save), "--skip-doctor")
    assert code == 0, err
    assert f"initialised the weights from {step_dir}" in out
    ours = checkpoint.latest(tmp_path / "run")
    assert ours is not None and ours.name == "step2"
    trained = checkpoint.load_model_state(ours)
    assert any(not torch.equal(trained[k], v) for k, v in oc_model.state_dict().items())  # it did train

    # 3. OLMo-core's own tools find our checkpoint and load it into its model
    assert [s for s, _ in Checkpointer.find_checkpoints(tmp_path / "run" / "checkpoints")] == [2]
    assert [s for s, _ in Checkpointer.find_checkpoints(tmp_path / "run" / "checkpoints", ephemeral=False)] == [2]
    assert not list(Checkpointer.find_checkpoints(tmp_path / "run" / "checkpoints", ephemeral=True))
    assert Checkpointer.dir_is_checkpoint(ours)
    load_model_and_optim_state(ours, oc_model)
    for k, v in oc_model.state_dict().items():
        assert torch.equal(v, trained[core.to_ours(k)]), k

    # 4. export-hf, and transformers' logits against OLMo-core's forward
    code, out, err = cli("export-hf", str(tmp_path / "run"), str(tmp_path / "hf"))
    assert code == 0, err
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    ids = torch.randint(0, 768, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (oc_model.eval()(ids) - hf(ids).logits).abs().max().item()
    assert diff <= 1e-5, diff

    # 5. export-hf straight from the OLMo-core save folder: its weights, its config.json, its tokenizer.json
    code, out, err = cli("export-hf", str(save), str(tmp_path / "hf-core"))
    assert code == 0, err
    assert json.loads((tmp_path / "hf-core" / "config.json").read_text())["num_hidden_layers"] == 4
    assert (tmp_path / "hf-core" / "tokenizer.json").read_bytes() == TOKENIZER_PATH.read_bytes()


def test_init_from_olmo_core_refuses_a_different_model(
    tiny_data: Path, tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    """An OLMo-core checkpoint without config.json: the recipe must fit the weights' shapes."""
    from olmo.model import Transformer

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {d_model: 32, n_layers: 2, n_heads: 4, mlp_hidden: 64, vocab_size: 768, "
                      f"max_seq_len: 64}}\ndata: {{paths: [{tiny_data}], seq_len: 32}}\nrun_dir: {tmp_path / 'run'}\n"
                      "device: cpu\nglobal_batch_size: 4\nmicro_batch_size: 4\nsteps: 2\n")
    step = tmp_path / "save" / "step5"
    checkpoint.save_weights(step / core.MODEL_AND_OPTIM, Transformer(load_recipe(str(recipe)).model).state_dict(), {})
    (step / core.MODEL_AND_OPTIM / checkpoint.TRAIN_STATE).unlink()  # OLMo-core writes no train_state.json
    args = ("train", str(recipe), "--init-from", str(tmp_path / "save"), "--skip-doctor")
    code, out, err = cli(*args, "--set", "model.n_layers=3")
    assert code == 2 and "holds a different model" in err and "blocks.2" in err, err
    assert not (tmp_path / "run" / "checkpoints").exists()
    code, out, err = cli(*args, "--set", "model.mlp_hidden=96")
    assert code == 2 and "feed_forward.w1.weight: (64, 32) here, (96, 32) in the config" in err, err
    code, out, err = cli(*args)  # the right shapes: it trains
    assert code == 0, err
    assert f"initialised the weights from {step}" in out


class _Payload:
    """Unpickling this opens (creates) the marker file: what a booby-trapped `.metadata` could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("layout", ["olmo-core", "ours"])
def test_a_booby_trapped_metadata_pickle_never_runs(layout: str, tmp_path: Path,
                                                    cli: Callable[..., tuple[int, str, str]]) -> None:
    import pickle

    marker = tmp_path / "pwned"
    ck = tmp_path / "save" / "step3"
    dcp_dir = ck / core.MODEL_AND_OPTIM if layout == "olmo-core" else ck
    dcp_dir.mkdir(parents=True)
    (dcp_dir / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    (ck / core.CONFIG_JSON).write_text(json.dumps({"model": {"d_model": 32, "n_layers": 1, "vocab_size": 768}}))
    if layout == "ours":
        (ck / checkpoint.TRAIN_STATE).write_text(json.dumps({"step": 3, "config": {"model": {
            "d_model": 32, "n_layers": 1, "n_heads": 4, "vocab_size": 768}}}))
    code, _, err = cli("export-hf", str(ck), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 2 and "io.open" in err and "refusing to load it" in err, err
    assert len(err.strip().splitlines()) == 1 and not marker.exists() and not (tmp_path / "hf").exists()


def test_export_refuses_a_config_json_that_does_not_fit_the_weights(tmp_path: Path,
                                                                   cli: Callable[..., tuple[int, str, str]]) -> None:
    from olmo.config import ModelConfig
    from olmo.model import Transformer

    step = tmp_path / "save" / "step9"
    model = Transformer(ModelConfig(d_model=32, n_layers=2, n_heads=4, mlp_hidden=64, vocab_size=768))
    checkpoint.save_weights(step / core.MODEL_AND_OPTIM, model.state_dict(), {})
    (step / core.MODEL_AND_OPTIM / checkpoint.TRAIN_STATE).unlink()
    conf = {"d_model": 32, "n_layers": 3, "vocab_size": 768, "lm_head": {"layer_norm": {"name": "rms"}},
            "block": {"sequence_mixer": {"n_heads": 4, "qk_norm": {}, "rope": {}}, "layer_norm": {"name": "rms"},
                      "feed_forward": {"hidden_size": 64}}}
    (step / core.CONFIG_JSON).write_text(json.dumps({"model": conf}))
    args = ("export-hf", str(tmp_path / "save"), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    code, _, err = cli(*args)
    assert code == 2 and "do not fit the model config" in err and "blocks.2" in err, err
    assert not (tmp_path / "hf").exists()
    conf["n_layers"] = 2
    (step / core.CONFIG_JSON).write_text(json.dumps({"model": conf}))
    code, _, err = cli(*args)
    assert code == 0, err
