"""config.json and weight names for Hugging Face: our model config and OLMo-core parameter names <-> transformers'
Olmo2Config / Olmo3Config and `Olmo2ForCausalLM` / `Olmo3ForCausalLM` keys (OLMo-core's `nn/hf/convert.py` map).
What the model cannot hold either way is a ConfigError naming the option."""

from __future__ import annotations

import re
from typing import Any

import torch

from olmo.config import ConfigError, ModelConfig

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
        "num_hidden_layers": m.n_layers, "num_attention_heads": m.n_heads,
        "num_key_value_heads": m.effective_n_kv_heads, "head_dim": m.effective_head_dim, "hidden_act": "silu",
        "max_position_embeddings": m.max_seq_len,
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


# config.json options of transformers' Olmo2Config/Olmo3Config that olmo's model does not have: (key, the values it
# computes the same way, what olmo has instead)
_HF_OPTIONS = (("hidden_act", ("silu",), "a SiLU-gated MLP"),
               ("partial_rotary_factor", (1, 1.0), "RoPE on the whole head"),
               ("attention_dropout", (0, 0.0), "no dropout"), ("clip_qkv", (), "q/k/v not clipped"),
               ("mlp_bias", (False,), "no MLP bias"))


def _refuse_hf_options(hf: dict[str, Any]) -> None:
    params: dict[str, Any] = hf["rope_parameters"] if isinstance(hf.get("rope_parameters"), dict) else {}
    for key, same, ours in _HF_OPTIONS:
        value = hf.get(key, params.get(key))  # transformers 5 keeps partial_rotary_factor in rope_parameters
        if value is not None and value not in same:
            raise ConfigError(f"config.json option {key}={str(value)[:40]!r} is not supported: olmo has {ours}; this "
                              "model cannot be imported")


def _refuse_hf_model(hf: dict[str, Any]) -> None:
    """ConfigError for a config.json that is no OLMo 2/3 model or has an option olmo's model does not have."""
    kind = hf.get("model_type")
    if kind not in ("olmo2", "olmo3"):
        raise ConfigError(f"config.json has model_type '{kind}'; olmo imports OLMo 2 (olmo2) and OLMo 3 (olmo3) "
                          "models only")
    if hf.get("attention_bias") or hf.get("tie_word_embeddings"):
        raise ConfigError("attention biases and tied embeddings are not part of OLMo 2/3; this model cannot be "
                          "imported")
    _refuse_hf_options(hf)


def _olmo3_windows(hf: dict[str, Any], n_layers: int) -> list[int]:
    """One entry per layer (-1: full attention): with no forced-full layers, window(i) is layer_types[i]."""
    types = hf.get("layer_types") or ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention"
                                      for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or any(
            t not in ("full_attention", "sliding_attention") for t in types):
        # a string would be read letter by letter: "abc" as three layers' worth of windows
        raise ConfigError(f"config.json layer_types must list 'full_attention' or 'sliding_attention' for each of "
                          f"its {n_layers} layers (got {str(types)[:60]!r}); it is not a complete OLMo 3 config")
    return [int(hf.get("sliding_window") or 4096) if t == "sliding_attention" else -1 for t in types]


def model_config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    _refuse_hf_model(hf)
    n_layers, n_heads, d = hf["num_hidden_layers"], hf["num_attention_heads"], hf["hidden_size"]
    kv = hf.get("num_key_value_heads", n_heads)
    if kv is None:
        kv = n_heads
    if not isinstance(kv, int) or isinstance(kv, bool) or kv < 1 or (isinstance(n_heads, int) and n_heads % kv):
        # 0 used to mean "as many as the query heads" by accident: the model would differ from the one exported
        raise ConfigError(f"config.json num_key_value_heads must be a positive divisor of num_attention_heads "
                          f"({n_heads}) (got {str(kv)[:40]!r}); it is not a complete OLMo 2/3 config")
    head_dim = hf.get("head_dim") or d // n_heads
    m = ModelConfig(d_model=d, n_layers=n_layers, n_heads=n_heads, n_kv_heads=None if kv == n_heads else kv,
                    head_dim=None if head_dim == d // n_heads else head_dim, mlp_hidden=hf["intermediate_size"],
                    vocab_size=hf["vocab_size"], max_seq_len=hf.get("max_position_embeddings") or 4096,
                    rope_theta=_rope_theta(hf), norm_eps=hf.get("rms_norm_eps", 1e-6),
                    init_std=hf.get("initializer_range", 0.02))
    if hf["model_type"] == "olmo3":
        m.sliding_window = _olmo3_windows(hf, n_layers)
        m.swa_full_first_layer = m.swa_full_last_layer = False
    return m
