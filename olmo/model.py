"""The OLMo 2 / OLMo 3 transformer, top to bottom in one file.

OLMo 2 differs from a Llama block in three ways (OLMo-core `ReorderedNormTransformerBlock`; arXiv:2501.00656):
RMSNorm is applied to each sublayer's *output* before the residual add (`h = x + norm(attn(x))`), q and k get
an RMSNorm over their full projection before RoPE (QK-norm), and RoPE uses theta = 500,000. There are no biases
and the output head is not tied to the embedding. OLMo 3 adds sliding-window attention on 3 of every 4 layers.

Parameter names are OLMo-core's, so a state dict converts 1:1 (and to Hugging Face with a fixed key map):

    embeddings.weight
    blocks.{i}.attention.{w_q,w_k,w_v,w_out}.weight    blocks.{i}.attention.{q_norm,k_norm}.weight
    blocks.{i}.attention_norm.weight                    (post-attention norm; HF post_attention_layernorm)
    blocks.{i}.feed_forward.{w1,w2,w3}.weight           (w1 gate, w3 up, w2 down)
    blocks.{i}.feed_forward_norm.weight                 (post-MLP norm; HF post_feedforward_layernorm)
    lm_head.norm.weight  lm_head.w_out.weight           (HF model.norm, lm_head)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from olmo.config import ModelConfig
from olmo.nn.attention import BACKENDS
from olmo.nn.attention import prepare as prepare_attention
from olmo.nn.linear import Linear, project
from olmo.nn.loss import fused_linear_cross_entropy


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32 whatever the input dtype (as OLMo-core's), with a learned scale and no bias."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (self.weight.float() * h).to(x.dtype)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def rope_tables(head_dim: int, seq_len: int, theta: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim) in fp32 for the "rotate half" RoPE layout used by OLMo-core and HF Olmo2."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, T, H, D) by position, in full precision, returning x's dtype."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return (xf * c + rotated * s).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        d, head_dim = cfg.d_model, cfg.effective_head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.effective_n_kv_heads, head_dim
        self.window = cfg.window(layer)
        # "auto" is resolved by the trainer before it builds the model; anywhere else it means SDPA
        self.backend = BACKENDS["sdpa" if cfg.attn_backend == "auto" else cfg.attn_backend].fn
        self.w_q = Linear(d, cfg.n_heads * head_dim)
        self.w_k = Linear(d, self.n_kv_heads * head_dim)
        self.w_v = Linear(d, self.n_kv_heads * head_dim)
        self.w_out = Linear(cfg.n_heads * head_dim, d)
        self.q_norm = RMSNorm(cfg.n_heads * head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.n_kv_heads * head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.fused_qkv = cfg.fuse_projections

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        if self.fused_qkv:  # one (d, 3d) matmul instead of three; the parameters keep OLMo-core's names
            qkv = project(x, (self.w_q, self.w_k, self.w_v))
            q, k, v = qkv.split([self.w_q.out_features, self.w_k.out_features, self.w_v.out_features], -1)
        else:
            q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        if self.q_norm is not None and self.k_norm is not None:  # over the whole projection, before the head split
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.view(b, t, self.n_heads, self.head_dim), cos, sin)
        k = apply_rope(k.view(b, t, self.n_kv_heads, self.head_dim), cos, sin)
        v = v.view(b, t, self.n_kv_heads, self.head_dim)
        out = self.backend(q, k, v, self.window)
        return self.w_out(out.reshape(b, t, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, d_model: int, hidden: int, fused: bool = False):
        super().__init__()
        self.w1 = Linear(d_model, hidden)
        self.w2 = Linear(hidden, d_model)
        self.w3 = Linear(d_model, hidden)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:  # gate and up projections as one matmul
            gate, up = project(x, (self.w1, self.w3)).chunk(2, dim=-1)
            return self.w2(F.silu(gate) * up)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """OLMo 2 "reordered norm" block: the norm sits on the sublayer output, inside the residual branch."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.attention = Attention(cfg, layer)
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg.d_model, cfg.mlp_hidden, cfg.fuse_projections)
        self.feed_forward_norm = RMSNorm(cfg.d_model, cfg.norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention_norm(self.attention(x, cos, sin))
        return h + self.feed_forward_norm(self.feed_forward(h))


class LMHead(nn.Module):
    """Final norm and output projection. Given labels it returns the loss instead of the logits, by default
    without materialising them (olmo.nn.loss); `fused_loss = False` takes the plain logits route."""

    def __init__(self, d_model: int, vocab_size: int, eps: float):
        super().__init__()
        self.norm = RMSNorm(d_model, eps)
        self.w_out = nn.Linear(d_model, vocab_size, bias=False)
        self.fused_loss = True
        self.loss_chunk_rows: int | None = None  # None: olmo.nn.loss picks ~2 GiB of logits per chunk

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None, z_loss_multiplier: float = 0.0
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if labels is None:
            return self.w_out(self.norm(x))
        if self.fused_loss:
            return fused_linear_cross_entropy(self.norm(x), self.w_out.weight, labels, z_loss_multiplier,
                                              chunk=self.loss_chunk_rows)
        return lm_loss(self.w_out(self.norm(x)), labels, z_loss_multiplier)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # A ModuleDict keyed "0".."n-1" keeps names like blocks.3.attention.w_q stable under FSDP and compile.
        self.blocks = nn.ModuleDict({str(i): Block(cfg, i) for i in range(cfg.n_layers)})
        self.lm_head = LMHead(cfg.d_model, cfg.vocab_size, cfg.norm_eps)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self._windows = {cfg.window(i) for i in range(cfg.n_layers)}

    def rope(self, t: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        # Computed once per (length, device) and shared by all blocks; not a buffer, so it is never checkpointed.
        if self._rope is None or self._rope[0].shape[0] < t or self._rope[0].device != device:
            self._rope = rope_tables(self.cfg.effective_head_dim, max(t, 1), self.cfg.rope_theta, device)
        cos, sin = self._rope
        return cos[:t], sin[:t]

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, vocab) for token ids (B, T); with `labels` (B, T, -100 = no loss) the loss
        (total, cross entropy, z-loss) instead, computed chunk by chunk without the full logits."""
        cos, sin = self.rope(input_ids.shape[1], input_ids.device)
        # per-shape attention set-up (flex block masks) here, outside the compiled blocks
        prepare_attention(self.cfg.attn_backend, input_ids.shape[1], self._windows, input_ids.device)
        h = self.embeddings(input_ids)
        device_type = input_ids.device.type
        if self.cfg.residual_dtype == "autocast" and torch.is_autocast_enabled(device_type):
            h = h.to(torch.get_autocast_dtype(device_type))
        for block in self.blocks.values():
            h = block(h, cos, sin)
        if labels is None:
            logits: torch.Tensor = self.lm_head(h)
            return logits
        return self.lm_head(h, labels, self.cfg.z_loss_multiplier)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """OLMo-core's `InitMethod.normal`: every linear and the embedding ~ truncated normal(0, init_std) cut at
        3 std; norms start at 1. One generator, seeded, so the same seed gives the same model on the same device."""
        std = self.cfg.init_std
        gen = torch.Generator(device=self.embeddings.weight.device).manual_seed(seed)
        for module in self.modules():
            if isinstance(module, RMSNorm):
                module.reset_parameters()
            elif isinstance(module, nn.Embedding | nn.Linear):
                init_whole(module.weight, lambda t: nn.init.trunc_normal_(t, mean=0.0, std=std, a=-3 * std,
                                                                          b=3 * std, generator=gen))


def init_whole(param: torch.Tensor, init: Callable[[torch.Tensor], object]) -> None:
    """Run `init` on `param` as one whole tensor, even when it is an FSDP2 shard (a DTensor): every rank draws the
    full tensor from the same generator and keeps its own slice, so a model sharded before it is initialised
    (olmo/parallel.py builds on the meta device) starts bit-identical to an unsharded one from the same seed."""
    if type(param) in (torch.Tensor, nn.Parameter):  # not sharded (and no torch.distributed import needed)
        init(param)
        return
    from torch.distributed.tensor import distribute_tensor

    full = torch.empty(param.shape, dtype=param.dtype, device=param.device)
    init(full)
    mine = distribute_tensor(full, param.device_mesh, param.placements,  # type: ignore[attr-defined]
                             src_data_rank=None)  # this rank's slice, cut locally: no communication
    param.to_local().copy_(mine.to_local())  # type: ignore[attr-defined]


def build_model(cfg: ModelConfig, device: torch.device, seed: int) -> Transformer:
    """Build on the meta device (no memory), allocate on `device`, then initialise there: a 7B model never
    materialises twice in host RAM."""
    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device=device)
    model.init_weights(seed)
    return model


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, z_loss_multiplier: float
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Mean next-token cross entropy (fp32) plus OLMo's z-loss, multiplier x mean(logsumexp(logits)^2).

    Returns (total, ce, z). `labels` holds -100 where no loss is taken."""
    flat = logits.float().reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1)
    ce = F.cross_entropy(flat, flat_labels, ignore_index=-100)
    if not z_loss_multiplier:
        return ce, ce, None
    mask = flat_labels != -100
    z = z_loss_multiplier * (flat.logsumexp(-1).pow(2) * mask).sum() / mask.sum().clamp(min=1)
    return ce + z, ce, z
