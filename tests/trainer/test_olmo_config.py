"""Config: named sizes match OLMo-core's factories, recipes load, and bad input is one line with exit code 2."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.config import ConfigError, ModelConfig, TrainConfig, check_vocab, model_size, validate
from olmo.recipe import apply_override, from_dict, load_recipe, recipes_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "d_model", "layers", "heads", "kv", "mlp"), [
    # OLMo-core factories (src/olmo_core/nn/transformer/config.py)
    ("olmo2_14m", 128, 4, 8, 8, 512),
    ("olmo2_30m", 256, 4, 8, 8, 768),
    ("olmo2_60m", 384, 8, 8, 8, 1536),
    ("olmo2_190m", 768, 12, 12, 12, 3072),
    ("olmo2_1b", 2048, 18, 16, 16, 8192),
    ("olmo2_1b_v2", 2048, 16, 16, 16, 8192),
    ("olmo2_7b", 4096, 32, 32, 32, 11008),
    ("olmo2_13b", 5120, 40, 40, 40, 13824),
    ("olmo2_32b", 5120, 64, 40, 8, 27648),
])
def test_named_sizes_match_olmo_core(name: str, d_model: int, layers: int, heads: int, kv: int, mlp: int) -> None:
    m = model_size(name)
    assert (m.d_model, m.n_layers, m.n_heads, m.effective_n_kv_heads, m.mlp_hidden) == (d_model, layers, heads, kv, mlp)
    assert m.effective_head_dim == 128 or d_model < 2048
    assert (m.vocab_size, m.rope_theta, m.norm_eps, m.qk_norm) == (100352, 500_000.0, 1e-6, True)


def test_parameter_counts_match_the_anchor() -> None:
    # derived from the shapes (V=100352, untied): 1.49B (1.07B in the blocks), 7.30B, 13.72B, 32.23B.
    # The exact 1B count is 1,484,916,736 (HF lists OLMo-2-0425-1B as 1.48B); 1.49B is that rounded up.
    m = ModelConfig.olmo2_1b_v2()
    assert m.num_params() == 1_484_916_736
    head = m.d_model * m.vocab_size + m.d_model
    assert round((m.num_params(embeddings=False) - head) / 1e9, 2) == 1.07
    assert round(ModelConfig.olmo2_7b().num_params() / 1e9, 2) == 7.30
    assert round(ModelConfig.olmo2_13b().num_params() / 1e9, 2) == 13.72
    assert round(ModelConfig.olmo2_32b().num_params() / 1e9, 2) == 32.23


def test_olmo3_sliding_window_pattern() -> None:
    m = ModelConfig.olmo3_7b()
    windows = [m.window(i) for i in range(m.n_layers)]
    assert windows[:4] == [4096, 4096, 4096, None] and windows[-1] is None
    assert windows.count(None) == 8  # 3 of every 4 layers slide; OLMo-core forces the last layer full
    # FLOPs as OLMo-core counts them: sliding layers attend min(window, seq) tokens
    full = ModelConfig.olmo2_7b()
    seq = 8192
    assert full.flops_per_token(seq) - m.flops_per_token(seq) == 24 * 12 * 32 * 128 * (seq - 4096)


def test_flops_per_token_formula() -> None:
    m = ModelConfig.olmo2_1b()
    assert m.flops_per_token(4096) == 6 * m.num_params(embeddings=False) + 12 * 18 * 16 * 128 * 4096


def _cfg(**kw: object) -> TrainConfig:
    cfg = TrainConfig(model=ModelConfig.tiny())
    cfg.data.seq_len = 128
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


@pytest.mark.parametrize(("change", "message"), [
    ({"global_batch_size": 10, "micro_batch_size": 4}, r"global_batch_size \(10\) is not a multiple of "
                                                       r"micro_batch_size \(4\) x devices \(1\); use 8 or 12"),
    ({"steps": 0}, r"steps must be a positive number \(got 0\)"),
    ({"hard_stop": 5000}, r"hard_stop \(5000\) must be between 1 and steps"),
    ({"precision": "fp16"}, "precision 'fp16' is not one of"),
])
def test_validation_messages(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(_cfg(**change))


def test_model_validation_messages() -> None:
    cfg = _cfg()
    cfg.data.seq_len = 1024
    with pytest.raises(ConfigError, match=r"data.seq_len \(1024\) is longer than the model allows \(model.max_seq_len "
                                          r"= 512\)"):
        validate(cfg)
    cfg = _cfg()
    cfg.model.n_heads = 3
    with pytest.raises(ConfigError, match=r"model.d_model \(128\) is not divisible by model.n_heads \(3\)"):
        validate(cfg)
    cfg = _cfg()
    cfg.model.attn_backend = "magic"
    with pytest.raises(ConfigError, match="attn_backend 'magic' is not one of: auto, sdpa, eager, flash_attn"):
        validate(cfg)


def test_vocab_check() -> None:
    check_vocab(100352, 100278, "dolma2")  # padded to a multiple of 128: fine
    check_vocab(768, 766, "tiny")
    with pytest.raises(ConfigError, match=r"^Model vocab_size \(50257\) does not match tokenizer vocab_size \(32000\)"):
        check_vocab(50257, 32000, "data/x")
    with pytest.raises(ConfigError, match=r"set model.vocab_size=768"):
        check_vocab(700, 766, "data/x")  # ids would fall off the embedding


def test_recipe_overrides_and_types(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("model: olmo2_60m\ndata: {paths: [d]}\n")
    cfg = load_recipe(str(path), ["optim.lr=3e-4", "model.n_layers=4", "data.paths=[a, b]", "steps=1e3",
                                  "model.sliding_window=[16,-1]", "hard_stop=null", "compile=true"])
    assert cfg.optim.lr == 3e-4 and isinstance(cfg.optim.lr, float)
    assert cfg.model.n_layers == 4 and cfg.model.d_model == 384  # the named size, then the override
    assert cfg.data.paths == ["a", "b"] and cfg.steps == 1000 and cfg.compile is True
    assert cfg.model.sliding_window == [16, -1] and cfg.hard_stop is None


@pytest.mark.parametrize(("raw", "message"), [
    ({"optim": {"lrr": 1}}, "unknown key 'optim.lrr'; did you mean 'optim.lr'?"),
    ({"stepz": 1}, "unknown key 'stepz'; did you mean 'steps'?"),
    ({"steps": "many"}, "steps must be int"),
    ({"steps": 2.5}, "steps must be int"),
    ({"model": "olmo9_1t"}, "unknown model size 'olmo9_1t'; use one of: tiny,"),
    ({"data": ["x"]}, "'data' must be a mapping"),
])
def test_recipe_errors(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_dict(raw, "r.yaml")


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigError, match=r"must look like section\.key=value"):
        apply_override({}, "optim.lr")


def test_shipped_recipes_load_and_validate() -> None:
    shipped = recipes_dir()
    assert shipped is not None
    names = sorted(p.name for p in shipped.iterdir() if p.suffix in (".yaml", ".py"))
    assert {"olmo2_60m.yaml", "olmo2_1b.yaml", "olmo3_7b.yaml", "olmo2_60m_short.py"} <= set(names)
    for spec in ("olmo2_60m", "olmo2_1b", "olmo3_7b", "olmo2_60m_short", "olmo2_60m_short:cpu_debug"):
        cfg = load_recipe(spec)
        validate(cfg)
    assert load_recipe("olmo2_1b").model == ModelConfig.olmo2_1b()
    assert load_recipe("olmo2_60m_short:cpu_debug").model.n_layers == 4


@pytest.mark.slow
def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path, tiny_data: Path, cli: Callable[..., tuple[int, str, str]]
                                          ) -> None:
    (tmp_path / "vocab.yaml").write_text(f"model: olmo2_60m\ndata: {{paths: [{tiny_data}], seq_len: 128}}\n"
                                         f"global_batch_size: 8\nmicro_batch_size: 8\nrun_dir: {tmp_path}/run\n")
    # Once through a real process: the console script's error path, with no traceback anywhere.
    res = subprocess.run([sys.executable, "-c", "from olmo.cli.main import main; main()", "train", "vocab.yaml"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (f"olmo: Model vocab_size (100352) does not match tokenizer vocab_size (766) of {tiny_data}; "
                          "set model.vocab_size=768 (padded to a multiple of 128) or use the data made with the "
                          "model's tokenizer\n")
    cases = [
        (["train", str(tmp_path / "vocab.yaml"), "--set", "global_batch_size=12"],
         "olmo: global_batch_size (12) is not a multiple of micro_batch_size (8) x devices (1); use 8 or 16"),
        (["train", "nope.yaml"], "olmo: recipe 'nope.yaml' not found"),
        (["train", str(tmp_path / "vocab.yaml"), "--set", "optim.lr=fast"], "olmo: "),
        (["train", "--smoke", "--resume"], "olmo: --smoke trains the bundled tiny model"),
        (["train"], "olmo: give a recipe"),
    ]
    for args, start in cases:
        code, _, err = cli(*args)
        assert code == 2, (args, err)
        assert err.startswith(start) and len(err.splitlines()) == 1, (args, err)
    assert "optim.lr must be float (got 'fast')" in cli("train", str(tmp_path / "vocab.yaml"), "--set",
                                                        "optim.lr=fast")[2]
    assert not (tmp_path / "run").exists()  # nothing half-written
