"""Every OLMo-core model option is supported, or refused by name in one line (export-hf, --init-from), never
taken silently (a `partial_rotary_factor=0.5` checkpoint used to export with exit 0 and logits 2.3e-2 off).

One checkpoint per option: the fast tests write OLMo-core's config.json by hand (the shape its as_config_dict
gives, every key spelled as OLMo-core 3.0 spells it); the slow one has OLMo-core itself write the model config
and the weights. The README's table is the code's table (`core_options.markdown_table`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import require_olmo_core

from olmo import checkpoint
from olmo.config import ModelConfig
from olmo.data.corpus import TOKENIZER_PATH
from olmo.interop import core_options
from olmo.interop import olmo_core as core

README = Path(__file__).parents[2] / "README.md"
_NORM = {"name": "rms", "eps": 1e-6, "bias": False, "dtype": "float32"}
# OLMo-core 3.0's as_config_dict of an OLMo 2 model of our micro shapes (its _CLASS_ keys left out: ignored)
BASE: dict[str, Any] = {
    "d_model": 32, "vocab_size": 768, "n_layers": 2, "name": "default", "dtype": "float32", "init_method": "normal",
    "init_seed": 0, "init_std": 0.02, "tie_word_embeddings": False,
    "block": {"name": "reordered_norm", "layer_norm": dict(_NORM),
              "sequence_mixer": {"type": "attention", "name": "default", "n_heads": 4, "bias": False,
                                 "rope": {"name": "default", "theta": 500000, "full_precision": True,
                                          "no_global_rope": False, "partial_rotary_factor": 1.0},
                                 "qk_norm": dict(_NORM), "backend": "torch", "dtype": "float32",
                                 "use_head_qk_norm": False, "scalable_softmax": False, "attention_sinks": False},
              "feed_forward": {"hidden_size": 64, "name": "default", "bias": False, "dtype": "float32",
                               "activation": "silu"}},
    "lm_head": {"name": "default", "layer_norm": dict(_NORM), "bias": False, "dtype": "float32",
                "loss_implementation": "default"},
}
# (dotted path as OLMo-core spells it, a value olmo cannot take): one checkpoint each
REFUSED: list[tuple[str, Any]] = [
    ("block.sequence_mixer.rope.partial_rotary_factor", 0.5),
    ("block.sequence_mixer.rope.no_global_rope", True),
    ("block.sequence_mixer.scalable_softmax", True),
    ("block.sequence_mixer.qk_norm.eps", 1e-5),
    ("lm_head.layer_norm.eps", 1e-5),
    ("block.sequence_mixer.rope.scaling", {"factor": 8.0, "beta_fast": 32, "beta_slow": 1, "old_context_len": 8192,
                                           "_CLASS_": "olmo_core.nn.rope.YaRNRoPEScalingConfig"}),
    ("block.sequence_mixer.rope.scaling", {"new_theta": 8000000, "_CLASS_": "olmo_core.nn.rope.ABFRoPEScalingConfig"}),
    ("block.sequence_mixer.rope.name", "complex"),
    ("block.sequence_mixer.bias", True),
    ("block.sequence_mixer.gate", {"granularity": "headwise", "full_precision": True}),
    ("block.sequence_mixer.clip_qkv", 8.0),
    ("block.sequence_mixer.use_head_qk_norm", True),
    ("block.sequence_mixer.qk_norm_per_head_gains", True),
    ("block.sequence_mixer.attention_sinks", True),
    ("block.sequence_mixer.name", "fused_v2"),
    ("block.sequence_mixer.type", "gated_delta_net"),
    ("block.sequence_mixer.qk_norm.name", "l2_norm"),
    ("block.layer_norm.name", "default"),
    ("block.layer_norm.name", "qwen_rms"),
    ("block.layer_norm.bias", True),
    ("block.layer_norm.elementwise_affine", False),
    ("block.name", "default"),
    ("block.name", "peri_norm"),
    ("block.name", "moe_reordered_norm"),
    ("block.feed_forward_moe", {"num_experts": 8, "hidden_size": 32}),
    ("block.attention_residual_alpha", 0.5),
    ("block.feed_forward_residual_alpha", 0.5),
    ("block.feed_forward.activation", "gelu_tanh"),
    ("block.feed_forward.bias", True),
    ("block.feed_forward.name", "normalized"),
    ("lm_head.name", "normalized"),
    ("lm_head.bias", True),
    ("lm_head.layer_norm", None),
    ("name", "moe"),
    ("embedding_norm", dict(_NORM)),
    ("block_pattern", ["attn", "gdn"]),
    ("block_overrides", {"0": {"name": "default"}}),
    ("embed_scale", 5.6),
    ("tie_word_embeddings", True),
    ("block.sequence_mixer.some_new_option", 3),  # a newer OLMo-core's option: unknown, so refused
]
TRAIN_ONLY: list[tuple[str, Any]] = [("block.dropout", 0.1), ("block.sequence_mixer.dropout", 0.1),
                                     ("freeze_params", ["embeddings.*"])]
SAME_MATH: list[tuple[str, Any]] = [("block.layer_norm.name", "fused_rms"), ("block.sequence_mixer.rope.name", "fused"),
                                    ("block.sequence_mixer.backend", "flash_2"), ("dtype", "bfloat16"),
                                    ("block.sequence_mixer.mxfp8_projections", True), ("init_std", 0.01),
                                    ("block.sequence_mixer.some_new_option", None), ("embedding_init_std", 0.5)]


def _with(path: str, value: Any) -> dict[str, Any]:
    conf = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = conf
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)  # as_config_dict leaves None out
    else:
        node[last] = value
    return conf


def _olmo_core_checkpoint(tmp_path: Path, conf: dict[str, Any]) -> Path:
    """An OLMo-core save folder whose step holds weights of our micro shapes and `conf` as its config.json."""
    from olmo.model import Transformer

    step = tmp_path / "save" / "step7"
    model = Transformer(ModelConfig(d_model=32, n_layers=2, n_heads=4, mlp_hidden=64, vocab_size=768))
    checkpoint.save_weights(step / core.MODEL_AND_OPTIM, model.state_dict(), {})
    (step / core.MODEL_AND_OPTIM / checkpoint.TRAIN_STATE).unlink()  # OLMo-core writes none
    (step / core.CONFIG_JSON).write_text(json.dumps({"model": conf}))
    return tmp_path / "save"


def _recipe(tmp_path: Path, tiny_data: Path) -> Path:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {d_model: 32, n_layers: 2, n_heads: 4, mlp_hidden: 64, vocab_size: 768, "
                      f"max_seq_len: 64}}\ndata: {{paths: [{tiny_data}], seq_len: 32}}\nrun_dir: {tmp_path / 'run'}\n"
                      "device: cpu\nglobal_batch_size: 4\nmicro_batch_size: 4\nsteps: 1\nsave_interval: 1\n")
    return recipe


def _refused(err: str, path: str) -> bool:
    lines = err.strip().splitlines()
    return len(lines) == 1 and f"OLMo-core option {path}=" in lines[0] and "is not supported" in lines[0] \
        and "Traceback" not in err


@pytest.mark.parametrize(("path", "value"), REFUSED, ids=[f"{p}={str(v)[:20]}" for p, v in REFUSED])
def test_an_option_olmo_cannot_represent_is_refused_by_name(path: str, value: Any, tmp_path: Path, tiny_data: Path,
                                                            cli: Callable[..., tuple[int, str, str]]) -> None:
    save = _olmo_core_checkpoint(tmp_path, _with(path, value))
    code, _, err = cli("export-hf", str(save), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 2 and _refused(err, path), err
    assert not (tmp_path / "hf").exists()
    code, _, err = cli("train", str(_recipe(tmp_path, tiny_data)), "--init-from", str(save), "--skip-doctor")
    assert code == 2 and _refused(err, path), err
    assert not (tmp_path / "run" / checkpoint.CHECKPOINTS).exists()


@pytest.mark.parametrize(("path", "value"), TRAIN_ONLY, ids=[p for p, _ in TRAIN_ONLY])
def test_a_training_only_option_is_refused_on_init_from_and_ignored_by_export(
        path: str, value: Any, tmp_path: Path, tiny_data: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    save = _olmo_core_checkpoint(tmp_path, _with(path, value))
    code, _, err = cli("train", str(_recipe(tmp_path, tiny_data)), "--init-from", str(save), "--skip-doctor")
    assert code == 2 and _refused(err, path) and "trains with" in err, err
    code, _, err = cli("export-hf", str(save), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 0, err


@pytest.mark.parametrize(("path", "value"), SAME_MATH, ids=[f"{p}={v}" for p, v in SAME_MATH])
def test_an_option_of_the_same_math_or_of_how_it_ran_is_taken(path: str, value: Any) -> None:
    assert core.model_config_dict(_with(path, value), training=True) == core.model_config_dict(BASE)


def test_the_base_config_translates_and_trains(tmp_path: Path, tiny_data: Path,
                                               cli: Callable[..., tuple[int, str, str]]) -> None:
    assert core.model_config_dict(BASE) == {"d_model": 32, "n_layers": 2, "vocab_size": 768, "n_heads": 4,
                                            "qk_norm": True, "mlp_hidden": 64, "rope_theta": 500000,
                                            "norm_eps": 1e-6}
    save = _olmo_core_checkpoint(tmp_path, BASE)
    code, _, err = cli("train", str(_recipe(tmp_path, tiny_data)), "--init-from", str(save), "--skip-doctor",
                       "--set", "model.rope_theta=500000", "--set", "model.norm_eps=1.0e-6")
    assert code == 0, err


def test_every_refusal_counts_and_the_first_is_named() -> None:
    conf = _with("block.sequence_mixer.scalable_softmax", True)
    conf["block"]["sequence_mixer"]["rope"]["partial_rotary_factor"] = 0.25
    with pytest.raises(core_options.UnsupportedOption, match=r"partial_rotary_factor=0.25 .*\(\+1 more\)"):
        core.model_config_dict(conf)


def test_readme_table_is_the_code_table() -> None:
    assert core_options.markdown_table() in README.read_text(), (
        "README's OLMo-core table differs from olmo/interop/core_options.py; paste markdown_table()'s output")


_OC_CLASSES = ("olmo_core.nn.transformer.config:TransformerConfig", "olmo_core.nn.transformer.config:"
               "TransformerBlockConfig", "olmo_core.nn.attention:AttentionConfig", "olmo_core.nn.rope:RoPEConfig",
               "olmo_core.nn.feed_forward:FeedForwardConfig", "olmo_core.nn.lm_head:LMHeadConfig")
_PREFIX = {"TransformerConfig": "", "TransformerBlockConfig": "block.", "AttentionConfig": "attn.",
           "RoPEConfig": "attn.rope.", "FeedForwardConfig": "block.feed_forward.", "LMHeadConfig": "lm_head."}


def test_the_table_has_every_field_of_olmo_cores_configs() -> None:
    """Read from the installed OLMo-core's dataclasses, so a release that adds an option fails here first."""
    require_olmo_core()
    import dataclasses
    import importlib

    known = {o.key for o in core_options.OPTIONS}
    missing = []
    for spec in _OC_CLASSES:
        module, name = spec.split(":")
        cls = getattr(importlib.import_module(module), name)
        for f in dataclasses.fields(cls):
            key = _PREFIX[name] + f.name
            if f.name not in ("block", "lm_head", "sequence_mixer", "attention") and key not in known:
                missing.append(key)
    from olmo_core.nn.layer_norm import LayerNormConfig

    for prefix in ("block.layer_norm.", "attn.qk_norm.", "lm_head.layer_norm."):
        missing += [prefix + f.name for f in dataclasses.fields(LayerNormConfig) if prefix + f.name not in known]
    assert not missing, missing


@pytest.mark.slow
def test_olmo_core_written_checkpoints_per_option(tmp_path: Path, cli: Callable[..., tuple[int, str, str]]) -> None:
    """OLMo-core itself writes the weights and config.json (its dataclasses, its as_config_dict) for each option."""
    require_olmo_core()
    from dataclasses import replace

    from olmo_core.distributed.checkpoint import save_model_and_optim_state
    from olmo_core.nn.layer_norm import LayerNormConfig, LayerNormType
    from olmo_core.nn.rope import YaRNRoPEScalingConfig
    from olmo_core.nn.transformer import TransformerConfig

    base = TransformerConfig.olmo2_1M(vocab_size=768)
    weights = tmp_path / "weights"
    save_model_and_optim_state(weights, base.build(init_device="cpu"))

    def attn(**kw: Any) -> TransformerConfig:
        return replace(base, block=replace(base.block, sequence_mixer=replace(base.block.sequence_mixer, **kw)))

    def rope(**kw: Any) -> TransformerConfig:
        return attn(rope=replace(base.block.sequence_mixer.rope, **kw))

    cases = {"block.sequence_mixer.rope.partial_rotary_factor": rope(partial_rotary_factor=0.5),
             "block.sequence_mixer.rope.no_global_rope": rope(no_global_rope=True),
             "block.sequence_mixer.rope.scaling": rope(scaling=YaRNRoPEScalingConfig()),
             "block.sequence_mixer.scalable_softmax": attn(scalable_softmax=True),
             "block.sequence_mixer.qk_norm.eps": attn(qk_norm=LayerNormConfig(name=LayerNormType.rms, eps=1e-3)),
             "block.sequence_mixer.bias": attn(bias=True),
             "block.sequence_mixer.clip_qkv": attn(clip_qkv=8.0),
             "block.sequence_mixer.attention_sinks": attn(attention_sinks=True),
             "tie_word_embeddings": replace(base, tie_word_embeddings=True)}
    for i, (path, conf) in enumerate(cases.items()):
        step = tmp_path / f"save{i}" / "step1"
        (step / core.MODEL_AND_OPTIM).mkdir(parents=True)
        for f in weights.iterdir():
            (step / core.MODEL_AND_OPTIM / f.name).write_bytes(f.read_bytes())
        (step / core.CONFIG_JSON).write_text(json.dumps({"model": conf.as_config_dict()}))
        code, _, err = cli("export-hf", str(step.parent), str(tmp_path / f"hf{i}"), "--tokenizer", str(TOKENIZER_PATH))
        assert code == 2 and _refused(err, path), (path, err)
    step = tmp_path / "plain" / "step1"  # and the unchanged model exports
    (step / core.MODEL_AND_OPTIM).mkdir(parents=True)
    for f in weights.iterdir():
        (step / core.MODEL_AND_OPTIM / f.name).write_bytes(f.read_bytes())
    (step / core.CONFIG_JSON).write_text(json.dumps({"model": base.as_config_dict()}))
    code, _, err = cli("export-hf", str(step.parent), str(tmp_path / "hf-plain"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 0, err


HF_REFUSED = [("hidden_act", "gelu"), ("partial_rotary_factor", 0.5), ("rope_parameters", {"rope_type": "default",
              "rope_theta": 10000.0, "partial_rotary_factor": 0.25}), ("attention_dropout", 0.1), ("clip_qkv", 8.0),
              ("mlp_bias", True)]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path, micro: Callable[..., Any]) -> Path:
    """An export of a 1-step micro run, made once for the import tests below (each edits a copy)."""
    from olmo.interop.hf import export_hf
    from olmo.train import train

    tmp = tmp_path_factory.mktemp("hf")
    cfg = micro(tiny_data, tmp / "run", steps=1)
    cfg.save_interval = 1
    train(cfg)
    return export_hf(tmp / "run", tmp / "hf")


@pytest.mark.parametrize(("key", "value"), HF_REFUSED, ids=[k for k, _ in HF_REFUSED])
def test_import_hf_refuses_a_transformers_option_by_name(key: str, value: Any, tmp_path: Path, hf_folder: Path,
                                                          cli: Callable[..., tuple[int, str, str]]) -> None:
    import shutil

    hf = shutil.copytree(hf_folder, tmp_path / "hf")
    conf = json.loads((hf / "config.json").read_text())
    conf[key] = value
    (hf / "config.json").write_text(json.dumps(conf))
    code, _, err = cli("import-hf", str(hf), str(tmp_path / "imp"))
    named = "partial_rotary_factor" if key == "rope_parameters" else key
    assert code == 2 and f"config.json option {named}=" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "imp").exists()
    conf.pop(key)  # and the same folder without it imports
    (hf / "config.json").write_text(json.dumps(conf))
    code, _, err = cli("import-hf", str(hf), str(tmp_path / "imp"))
    assert code == 0, err
