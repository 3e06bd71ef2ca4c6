"""Every option of OLMo-core's model config (3.x: TransformerConfig, TransformerBlockConfig, AttentionConfig,
RoPEConfig, LayerNormConfig, FeedForwardConfig, LMHeadConfig) and what olmo does with it: the one table.

An option is `shape` (translated into our ModelConfig), `same` (accepted when its value is one olmo computes the
same way), `off` (olmo's model has no such thing: refused by name unless it is off), `train` (a training-only
setting: refused by name on `--init-from`, where olmo would silently train without it; export ignores it),
`runtime` (how OLMo-core ran, not what the model computes: olmo uses its own choice) or `init` (initialisation
only: the weights are loaded). A key OLMo-core has and this table does not (a newer release) is refused by name
unless it is off (None or false). The README's OLMo-core table is `markdown_table()`; a test keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from olmo.errors import OlmoError


class UnsupportedOption(OlmoError):
    """An OLMo-core model option olmo cannot represent (exit 2, one line naming it)."""


@dataclass(frozen=True)
class Option:
    key: str  # dotted path in OLMo-core's model config ("block." is the block, "attn." its sequence mixer)
    kind: str  # shape, same, off, train, runtime, init
    ours: str  # what olmo has (the table's "olmo" column)
    hf: str  # what transformers' Olmo2/Olmo3 have ("HF" column)
    accepted: tuple[Any, ...] = ()  # for `same`: the values olmo computes the same way


_RMS = ("rms", "fused_rms", "cute_rms")  # OLMo-core's RMSNorm and its two kernels of the same math


def _rms_norm(prefix: str, eps: str = "norm_eps (one eps for every norm)",
              hf_eps: str = "rms_norm_eps (one eps)") -> tuple[Option, ...]:
    """The rows of one LayerNormConfig (the block's, QK-norm's, the head's): an RMSNorm with weights, no bias."""
    return (Option(f"{prefix}.name", "same", "RMSNorm", "RMSNorm", _RMS),
            Option(f"{prefix}.eps", "shape", eps, hf_eps),
            Option(f"{prefix}.elementwise_affine", "same", "norm weights", "norm weights", (None, True)),
            Option(f"{prefix}.bias", "off", "no norm bias", "none"),
            Option(f"{prefix}.full_precision", "runtime", "norms computed in fp32", "fp32"),
            Option(f"{prefix}.dtype", "runtime", "weights cast to fp32", "-"))


OPTIONS: tuple[Option, ...] = (
    Option("name", "same", "the default transformer", "Olmo2/Olmo3", ("default",)),
    Option("d_model", "shape", "d_model", "hidden_size"),
    Option("vocab_size", "shape", "vocab_size", "vocab_size"),
    Option("n_layers", "shape", "n_layers", "num_hidden_layers"),
    Option("embedding_norm", "off", "no norm after the embedding", "none"),
    Option("dtype", "runtime", "weights cast to olmo's fp32 master weights", "torch_dtype"),
    Option("init_method", "init", "weights are loaded", "-"),
    Option("init_seed", "init", "weights are loaded", "-"),
    Option("init_std", "init", "weights are loaded", "initializer_range"),
    Option("embedding_init_std", "init", "weights are loaded", "-"),
    Option("freeze_params", "train", "every parameter trains", "-"),
    Option("block_pattern", "off", "one block kind for every layer", "none"),
    Option("block_overrides", "off", "one block kind for every layer", "none"),
    Option("embed_scale", "off", "no embedding scale", "none"),
    Option("tie_word_embeddings", "off", "a separate output head", "tie_word_embeddings (not in OLMo 2/3)"),
    Option("block.name", "same", "reordered-norm block (OLMo 2/3)", "post-norm decoder layer", ("reordered_norm",)),
    Option("block.layer_norm", "shape", "RMSNorm after attention and after the MLP (required)",
           "post_attention/post_feedforward_layernorm"),
    *_rms_norm("block.layer_norm", "norm_eps", "rms_norm_eps"),
    Option("block.dropout", "train", "no dropout", "-"),
    Option("block.attention_residual_alpha", "off", "residual added unscaled", "none"),
    Option("block.feed_forward_residual_alpha", "off", "residual added unscaled", "none"),
    Option("block.feed_forward_moe", "off", "dense SwiGLU MLP (no MoE)", "OlmoeForCausalLM (not exported)"),
    Option("block.feed_forward", "shape", "SwiGLU MLP (required)", "mlp"),
    Option("block.feed_forward.name", "same", "SwiGLU MLP", "SwiGLU MLP", ("default",)),
    Option("block.feed_forward.hidden_size", "shape", "mlp_hidden", "intermediate_size"),
    Option("block.feed_forward.activation", "same", "SiLU", "hidden_act silu", ("silu",)),
    Option("block.feed_forward.bias", "off", "no MLP bias", "none"),
    Option("block.feed_forward.dtype", "runtime", "weights cast to fp32", "-"),
    Option("attn.type", "same", "softmax attention", "self-attention", ("attention",)),
    Option("attn.name", "same", "separate q/k/v projections", "q_proj/k_proj/v_proj", ("default",)),
    Option("attn.n_heads", "shape", "n_heads", "num_attention_heads"),
    Option("attn.n_kv_heads", "shape", "n_kv_heads", "num_key_value_heads"),
    Option("attn.head_dim", "shape", "head_dim", "head_dim"),
    Option("attn.bias", "off", "no attention bias", "attention_bias (not in OLMo 2/3)"),
    Option("attn.gate", "off", "no attention output gate", "none"),
    Option("attn.clip_qkv", "off", "q/k/v not clipped", "none in Olmo2/Olmo3"),
    Option("attn.qk_norm", "shape", "qk_norm (RMSNorm over the whole q and k)", "q_norm/k_norm"),
    *_rms_norm("attn.qk_norm"),
    Option("attn.use_head_qk_norm", "off", "QK-norm over the whole projection", "whole projection"),
    Option("attn.qk_norm_per_head_gains", "off", "one QK-norm weight per channel", "none"),
    Option("attn.dropout", "train", "no dropout", "attention_dropout 0"),
    Option("attn.use_flash", "runtime", "attn_backend (olmo's choice)", "attn_implementation"),
    Option("attn.backend", "runtime", "attn_backend (olmo's choice)", "attn_implementation"),
    Option("attn.dtype", "runtime", "weights cast to fp32", "-"),
    Option("attn.sliding_window", "shape", "sliding_window + swa_full_first/last_layer", "Olmo3 layer_types"),
    Option("attn.scalable_softmax", "off", "plain softmax", "none"),
    Option("attn.attention_sinks", "off", "no attention sinks", "none in Olmo2/Olmo3"),
    Option("attn.mxfp8_projections", "runtime", "precision (olmo's choice)", "-"),
    Option("attn.mxfp8_qkv_projection", "runtime", "precision (olmo's choice)", "-"),
    Option("attn.mxfp8_out_projection", "runtime", "precision (olmo's choice)", "-"),
    Option("attn.mxfp8_save_qkv_for_backward", "runtime", "precision (olmo's choice)", "-"),
    Option("attn.use_recompute_qkv_prep", "runtime", "activation checkpointing (olmo's choice)", "-"),
    Option("attn.rope", "shape", "RoPE on every layer (required)", "RoPE"),
    Option("attn.rope.name", "same", "RoPE on the two halves of each head", "RoPE (rotate_half)",
           ("default", "fused")),
    Option("attn.rope.theta", "shape", "rope_theta", "rope_theta"),
    Option("attn.rope.full_precision", "runtime", "RoPE computed in fp32", "fp32"),
    Option("attn.rope.no_global_rope", "off", "RoPE on every layer", "RoPE on every layer"),
    Option("attn.rope.scaling", "off", "plain RoPE (no YaRN/PI/ABF/stepwise scaling)",
           "rope_scaling (not exported by olmo)"),
    Option("attn.rope.partial_rotary_factor", "same", "RoPE over the whole head", "whole head in Olmo2/Olmo3",
           (None, 1, 1.0)),
    Option("lm_head.name", "same", "linear head after a final norm", "lm_head + model.norm", ("default",)),
    Option("lm_head.layer_norm", "shape", "final RMSNorm (required)", "model.norm"),
    *_rms_norm("lm_head.layer_norm"),
    Option("lm_head.bias", "off", "no head bias", "none"),
    Option("lm_head.dtype", "runtime", "weights cast to fp32", "-"),
    Option("lm_head.loss_implementation", "runtime", "olmo's fused cross-entropy", "-"),
)
_BY_KEY = {o.key: o for o in OPTIONS}
# the sub-configs whose keys are judged one by one; the others (sliding_window, gate, rope.scaling, the MoE
# feed-forward, embedding_norm) are judged whole
_SECTIONS = ("block", "attn", "attn.rope", "attn.qk_norm", "block.layer_norm", "block.feed_forward", "lm_head",
             "lm_head.layer_norm")
_METADATA = ("_CLASS_",)  # OLMo-core's config serialisation, not an option


# (key, the section it belongs to): a model without one of these is another model
_REQUIRED = (("block.layer_norm", "block."), ("block.feed_forward", "block."), ("lm_head.layer_norm", "lm_head."),
             ("attn.rope", "attn."))


def _off(value: Any) -> bool:
    return value in (None, False, 0, 0.0, "", [], {})


def _flatten(core: dict[str, Any]) -> dict[str, Any]:
    """OLMo-core's nested model dict as {our dotted key: value}; the block's sequence mixer (3.x) or attention
    (2.x) becomes `attn.`. Whole sub-configs stay as values too (`attn.rope.scaling`, `block.feed_forward_moe`)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, d: dict[str, Any]) -> None:
        for k, v in d.items():
            if k in _METADATA:
                continue
            key = f"{prefix}{k}"
            if key in ("block.sequence_mixer", "block.attention"):
                key = "attn"
            if isinstance(v, dict) and key in _SECTIONS:
                walk(key + ".", v)
                if key not in _BY_KEY:  # a section only (block, attn, lm_head): its keys are judged
                    continue
            out[key] = v

    walk("", core)
    return out


def _problem(key: str, value: Any, training: bool) -> str | None:
    """Why olmo cannot take `key`=`value`, or None when it can."""
    opt = _BY_KEY.get(key)
    if opt is None:
        return None if _off(value) else "an OLMo-core option olmo does not know (a newer OLMo-core?)"
    if opt.kind == "off" and not _off(value):
        return f"olmo has {opt.ours}"
    if opt.kind == "train" and training and not _off(value):
        return f"olmo trains with {opt.ours}; drop it from the OLMo-core config.json to fine-tune without it"
    if opt.kind == "same" and value not in opt.accepted:
        return f"olmo has {opt.ours}"
    return None


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def _path(key: str) -> str:
    """The key as OLMo-core's config.json spells it (for the message)."""
    return key.replace("attn.", "block.sequence_mixer.", 1) if key.startswith("attn.") else key


Problem = tuple[str, Any, str]  # (key, value, why olmo cannot take it)


def _named_blocks(core: dict[str, Any]) -> list[Problem]:
    """A dict of named block configs (a hybrid model's layer kinds) in place of one block."""
    block = core.get("block")
    if isinstance(block, dict) and block and all(isinstance(v, dict) and "sequence_mixer" in v for v in block.values()):
        return [("block", "{" + ", ".join(sorted(block))[:60] + "}", "olmo has one block kind for every layer")]
    return []


def _missing(flat: dict[str, Any]) -> list[Problem]:
    """A part olmo's model always has, left out (config.json leaves None out): another model."""
    return [(key, None, f"olmo's model always has {_BY_KEY[key].ours.removesuffix(' (required)')}")
            for key, section in _REQUIRED if flat.get(key) is None and any(k.startswith(section) for k in flat)]


def _eps_differ(flat: dict[str, Any]) -> list[Problem]:
    keys: tuple[str, ...] = ("block.layer_norm.eps", "attn.qk_norm.eps", "lm_head.layer_norm.eps")
    eps: dict[str, Any] = {k: flat[k] for k in keys if k in flat}
    first, *rest = list(eps) or [""]
    other = [k for k in rest if eps[k] != eps[first]]
    why = f"olmo (and transformers' Olmo2/Olmo3) use one eps for every norm; {_path(first)} is {eps.get(first)}"
    return [(other[0], eps[other[0]], why)] if other else []


def check(core: dict[str, Any], training: bool) -> None:
    """UnsupportedOption naming the first option of `core` olmo cannot represent (with how many more)."""
    bad = _named_blocks(core)
    if not bad:
        flat = _flatten(core)
        bad = [(k, v, why) for k, v in flat.items() if (why := _problem(k, v, training))]
        bad += _missing(flat) + _eps_differ(flat)
    if bad:
        key, value, why = bad[0]
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UnsupportedOption(f"OLMo-core option {_path(key)}={_shown(value)} is not supported: {why}{more}; "
                                "see the OLMo-core table in olmo's README")


def markdown_table() -> str:
    """The README's table: every OLMo-core option, what olmo and transformers do with it."""
    verdict = {"shape": "supported", "same": "supported: {accepted}; anything else refused",
               "off": "refused by name unless off", "train": "refused by name on --init-from unless off; "
               "ignored by export", "runtime": "olmo's own choice", "init": "not needed (weights are loaded)"}
    rows = ["| OLMo-core option | olmo | transformers (Olmo2/Olmo3) | verdict |", "| --- | --- | --- | --- |"]
    for o in OPTIONS:
        accepted = ", ".join(str(a) for a in o.accepted if a is not None)
        rows.append(f"| `{_path(o.key)}` | {o.ours} | {o.hf} | {verdict[o.kind].format(accepted=accepted)} |")
    return "\n".join(rows)
