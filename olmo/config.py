"""Training configuration: four dataclasses, named model sizes, and validation with one-line messages.

`TrainConfig` is the whole run: a `ModelConfig` (the network's shape), a `DataConfig` (token shards), an
`OptimConfig` (AdamW and the schedule) and the loop's own fields. Named sizes mirror OLMo-core's
`TransformerConfig.olmo2_*` / `olmo3_*` factories (src/olmo_core/nn/transformer/config.py), so
`ModelConfig.olmo2_1b()` has exactly the shape of OLMo-core's `olmo2_1B` and its weights convert 1:1.
Recipes (YAML or Python) and `--set a.b=c` overrides are turned into these objects by olmo/recipe.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from olmo.errors import ConfigError as ConfigError  # re-exported: modules and recipes import it from here


def llama_like_hidden(d_model: int, multiplier: float = 1.0, multiple_of: int = 256) -> int:
    """SwiGLU width per branch, as OLMo-core's `llama_like`: int(8d/3), times the multiplier, rounded up."""
    hidden = int(multiplier * int(8 * d_model / 3))
    return multiple_of * math.ceil(hidden / multiple_of)


def padded_vocab(vocab_size: int, multiple: int = 128) -> int:
    """Embedding rows for a tokenizer: OLMo pads 100278 (dolma2) to 100352, a multiple of 128."""
    return multiple * math.ceil(vocab_size / multiple)


DOLMA2_PADDED_VOCAB = 100352  # dolma2 tokenizer: 100278 ids padded to a multiple of 128 (OLMo-core)
OLMO3_SWA = [4096, 4096, 4096, -1]  # 3 sliding layers of 4096 tokens, then 1 full (OLMo-core olmo3_7B)


@dataclass
class ModelConfig:
    """The shape of an OLMo 2/3 transformer (reordered-norm blocks, QK-norm, SwiGLU, RoPE, untied head)."""

    d_model: int = 384
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: int | None = None  # None: as many as n_heads (MHA); fewer: grouped-query attention
    head_dim: int | None = None  # None: d_model // n_heads
    mlp_hidden: int = 1536  # SwiGLU width per branch (w1 and w3 each map d_model -> mlp_hidden)
    vocab_size: int = DOLMA2_PADDED_VOCAB  # embedding rows: the tokenizer's vocab, maybe padded to 128
    max_seq_len: int = 4096  # longest sequence the model is configured for (RoPE table size)
    rope_theta: float = 500_000.0
    norm_eps: float = 1e-6
    qk_norm: bool = True  # RMSNorm over the full projected q and k, before RoPE (OLMo 2)
    sliding_window: list[int] | None = None  # per-layer window pattern, repeated; -1 = full (OLMo 3)
    swa_full_first_layer: bool = False  # OLMo 3 keeps the pattern on layer 0 ...
    swa_full_last_layer: bool = True  # ... and forces full attention on the last layer
    init_std: float = 0.02  # truncated normal (cut at 3 std) for every linear and the embedding
    z_loss_multiplier: float = 1e-5  # softmax auxiliary loss; 0 turns it off
    # auto: the fastest correct backend for these shapes on this GPU (olmo/nn/attention_choice.py), or a name in
    # olmo.nn.attention.BACKENDS: sdpa, flash_attn, eager
    attn_backend: str = "auto"
    fuse_projections: bool = False  # q/k/v and gate/up as one matmul each (same parameters, same math)
    # Under bf16 autocast, carry the residual stream in bf16 (as FSDP2 with bf16 params does, the way OLMo-core
    # trains) rather than in fp32 (plain autocast keeps the fp32 embedding output): half the memory traffic of
    # every norm and residual add. "fp32" keeps single-GPU autocast's behaviour. RMSNorm computes in fp32 either way.
    residual_dtype: str = "autocast"

    @property
    def n_kv(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def hd(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    def window(self, layer: int) -> int | None:
        """Sliding window (tokens attended, the current one included) of `layer`, or None for full attention."""
        if not self.sliding_window:
            return None
        if (self.swa_full_first_layer and layer == 0) or (self.swa_full_last_layer and layer == self.n_layers - 1):
            return None
        idx = layer - 1 if self.swa_full_first_layer else layer
        w = self.sliding_window[idx % len(self.sliding_window)]
        return None if w == -1 else w

    @property
    def windowed(self) -> bool:
        """Whether any layer uses sliding-window attention."""
        return any(self.window(layer) is not None for layer in range(self.n_layers))

    def num_params(self, embeddings: bool = True) -> int:
        d, hd = self.d_model, self.hd
        attn = d * hd * (self.n_heads * 2 + self.n_kv * 2)  # w_q, w_out, w_k, w_v
        qk = (self.n_heads + self.n_kv) * hd if self.qk_norm else 0
        block = attn + qk + 3 * d * self.mlp_hidden + 2 * d
        head = d * self.vocab_size + d
        return self.n_layers * block + head + (d * self.vocab_size if embeddings else 0)

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token as OLMo-core counts them: 6 x (block + head params) plus 12 x heads x
        head_dim x the attended length per layer (no causal halving; sliding layers count min(window, seq))."""
        attn = sum(12 * self.n_heads * self.hd * min(self.window(i) or seq_len, seq_len) for i in range(self.n_layers))
        return 6 * self.num_params(embeddings=False) + attn

    # ----- named sizes (OLMo-core factory names, lower-cased) -----
    @classmethod
    def olmo2_like(cls, d_model: int, n_layers: int, n_heads: int, multiplier: float = 1.0,
                   multiple_of: int = 256, **kw: object) -> ModelConfig:
        return cls(d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                   mlp_hidden=llama_like_hidden(d_model, multiplier, multiple_of), **kw)  # type: ignore[arg-type]

    @classmethod
    def tiny(cls) -> ModelConfig:
        """The smoke-test model: 4 layers of width 128 over the bundled 766-token tokenizer (padded to 768)."""
        return cls.olmo2_like(128, 4, 4, vocab_size=768, max_seq_len=512)

    @classmethod
    def olmo2_14m(cls) -> ModelConfig:
        return cls.olmo2_like(128, 4, 8)

    @classmethod
    def olmo2_30m(cls) -> ModelConfig:
        return cls.olmo2_like(256, 4, 8)

    @classmethod
    def olmo2_60m(cls) -> ModelConfig:
        return cls.olmo2_like(384, 8, 8, multiplier=1.5)

    @classmethod
    def olmo2_190m(cls) -> ModelConfig:
        return cls.olmo2_like(768, 12, 12, multiplier=1.5)

    @classmethod
    def olmo2_1b(cls) -> ModelConfig:
        """OLMo-core `olmo2_1B`: 18 layers (not the released OLMo-2-0425-1B, which is `olmo2_1b_v2`)."""
        return cls.olmo2_like(2048, 18, 16, multiplier=1.5)

    @classmethod
    def olmo2_1b_v2(cls) -> ModelConfig:
        """OLMo-core `olmo2_1B_v2`: 16 layers, the shape of the released OLMo-2-0425-1B."""
        return cls.olmo2_like(2048, 16, 16, multiplier=1.5)

    @classmethod
    def olmo2_7b(cls) -> ModelConfig:
        return cls.olmo2_like(4096, 32, 32)

    @classmethod
    def olmo2_13b(cls) -> ModelConfig:
        return cls.olmo2_like(5120, 40, 40)

    @classmethod
    def olmo2_32b(cls) -> ModelConfig:
        return cls.olmo2_like(5120, 64, 40, n_kv_heads=8, multiplier=27648 / (8 * 5120 / 3), multiple_of=512)

    @classmethod
    def olmo3_7b(cls) -> ModelConfig:
        """OLMo 3 7B: the OLMo 2 7B shape with sliding-window attention on 3 of every 4 layers."""
        return cls.olmo2_like(4096, 32, 32, sliding_window=list(OLMO3_SWA), max_seq_len=8192)

    @classmethod
    def olmo3_32b(cls) -> ModelConfig:
        m = cls.olmo2_32b()
        m.sliding_window, m.max_seq_len = list(OLMO3_SWA), 8192
        return m


MODEL_SIZES = ("tiny", "olmo2_14m", "olmo2_30m", "olmo2_60m", "olmo2_190m", "olmo2_1b", "olmo2_1b_v2",
               "olmo2_7b", "olmo2_13b", "olmo2_32b", "olmo3_7b", "olmo3_32b")


def model_size(name: str) -> ModelConfig:
    """The named size `name` (case-insensitive), or a ConfigError listing the names."""
    key = name.lower().replace("-", "_")
    if key not in MODEL_SIZES:
        raise ConfigError(f"unknown model size '{name}'; use one of: {', '.join(MODEL_SIZES)}")
    factory: Callable[[], ModelConfig] = getattr(ModelConfig, key)
    return factory()


@dataclass
class DataConfig:
    """Where the token shards are and how they are cut into training sequences."""

    paths: list[str] = field(default_factory=list)  # shard dirs (manifest.json) or .npy files / globs
    val_paths: list[str] = field(default_factory=list)  # a separate validation split, if any
    val_fraction: float = 0.0  # else hold out this share of the training sequences for eval
    seq_len: int = 4096  # tokens per training sequence (windows of the concatenated documents)
    seed: int = 0  # shuffling seed; the order of sequences is a function of (seed, epoch) only
    dtype: str | None = None  # uint16/uint32, only for shards without a manifest (e.g. `dolma tokens` output)
    vocab_size: int | None = None  # the tokenizer's vocab, only for shards without a manifest


@dataclass
class OptimConfig:
    """AdamW plus a warmup-then-decay learning-rate schedule (OLMo 2/3 settings by default)."""

    lr: float = 4e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    weight_decay: float = 0.1  # applied to every parameter except the embedding, as OLMo-core's scripts do
    grad_clip: float = 1.0  # max global grad norm; 0 turns clipping off
    warmup_steps: int = 2000
    schedule: str = "cosine"  # cosine | linear | constant (after warmup)
    final_lr_ratio: float = 0.1  # the decay ends at lr x this
    fused: bool | None = None  # torch's fused AdamW kernel when the copies below are not used; None: on for CUDA
    # one process, bf16 on a GPU: the optimizer keeps bf16 copies of the block weights for the forward and reads
    # their bf16 gradients (olmo/optim/mixed_precision.py; same numbers, no per-step casts). Ignored under DDP/FSDP2.
    compute_copies: bool = True


SCHEDULES = ("cosine", "linear", "constant")


@dataclass
class ParallelConfig:
    """How the model is spread over the processes `torchrun` starts, and what it recomputes to save memory.

    Data parallelism applies only when there is more than one process; activation checkpointing applies always."""

    dp: str = "fsdp"  # fsdp: FSDP2, parameters/grads/AdamW state sharded | ddp: replicated, grads all-reduced
    ac: str = "none"  # activation checkpointing: none | full (every block) | selective (every ac_every-th block)
    # | auto (the fewest blocks that fit this GPU's memory with a margin, none when all fits; olmo/ac_plan.py)
    ac_every: int = 2  # with ac=selective: checkpoint blocks 0, N, 2N, ... (N=2 saves about half the activations)
    reshard_after_forward: bool = True  # fsdp: free gathered params after forward (ZeRO-3); false keeps them until
    # backward (ZeRO-2 style: one all-gather per step less, one block's full params more memory)
    sync_every_micro_batch: bool = False  # reduce grads after every micro-batch instead of only the last one (less
    # memory under fsdp with grad accumulation, more communication)


DP_MODES = ("fsdp", "ddp")
PRECISIONS = ("auto", "bf16", "fp32", "fp8")
AC_MODES = ("none", "full", "selective", "auto")


@dataclass
class TrainConfig:
    """One training run: what to train, on what, how, and where its outputs go."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    run_dir: str = "runs/olmo"  # metrics.jsonl, config.yaml and checkpoints/ go here
    steps: int = 1000  # optimizer steps; the schedule spans exactly this many
    hard_stop: int | None = None  # stop early at this step (e.g. a job time limit) without changing the schedule
    global_batch_size: int = 64  # sequences per optimizer step, summed over devices and micro-batches
    micro_batch_size: int = 8  # sequences per forward/backward on one device
    seed: int = 0  # model init and torch/numpy/python RNGs
    init_from: str | None = None  # start from these weights (a checkpoint or run dir, e.g. from `olmo import-hf`);
    # step, optimizer and data order start fresh. Ignored once run_dir has its own checkpoint (--resume wins).
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 autocast on CUDA, fp32 on CPU) | bf16 | fp32 | fp8 (bf16 with the blocks'
    # projections multiplied in float8 through torchao, on GPUs of compute capability 8.9+; olmo/nn/float8.py)
    compile: bool = False  # torch.compile each block
    # replay each step as one CUDA graph (olmo/cuda_graph.py): no launch gaps. One process on a GPU with bf16 and
    # optim.compute_copies only (ignored otherwise, with a warning); the first 3 steps run eagerly to warm up.
    cuda_graph: bool = False
    log_interval: int = 10  # steps between console lines and metrics.jsonl records
    eval_interval: int = 0  # steps between eval passes; 0: only at the end (when there is an eval split)
    eval_batches: int = 20  # micro-batches per eval pass
    save_interval: int = 1000  # steps between checkpoints (the final step is always saved)
    keep_last_n: int = 3  # checkpoints kept on disk; 0 keeps all
    wandb_project: str | None = None  # log to Weights & Biases too, when wandb is installed
    tensorboard: bool = False  # write TensorBoard events to run_dir/tb, when tensorboard is installed

    def grad_accum(self, world_size: int = 1) -> int:
        return self.global_batch_size // (self.micro_batch_size * world_size)


def _nearest_multiples(n: int, unit: int) -> str:
    lo, hi = (n // unit) * unit, (n // unit + 1) * unit
    return f"{lo} or {hi}" if lo > 0 else str(hi)


def validate(cfg: TrainConfig, world_size: int = 1) -> None:
    """Raise ConfigError (one line, what to do) for a config that cannot train. Data-dependent checks (vocab
    against the tokenizer, enough tokens for a batch) happen when the shards are opened (olmo/data/loader.py)."""
    from olmo.config_numbers import check_numbers

    check_numbers(cfg)  # NaN, infinity and out-of-range optimizer/model numbers, by field name
    m, d, o = cfg.model, cfg.data, cfg.optim
    for name, value in (("model.d_model", m.d_model), ("model.n_layers", m.n_layers), ("model.n_heads", m.n_heads),
                        ("model.mlp_hidden", m.mlp_hidden), ("model.vocab_size", m.vocab_size),
                        ("data.seq_len", d.seq_len), ("steps", cfg.steps), ("micro_batch_size", cfg.micro_batch_size),
                        ("global_batch_size", cfg.global_batch_size), ("log_interval", cfg.log_interval),
                        ("save_interval", cfg.save_interval)):
        if value <= 0:
            raise ConfigError(f"{name} must be a positive number (got {value})")
    if m.head_dim is None and m.d_model % m.n_heads:
        raise ConfigError(f"model.d_model ({m.d_model}) is not divisible by model.n_heads ({m.n_heads}); "
                          "change one of them or set model.head_dim")
    if m.n_heads % m.n_kv:
        raise ConfigError(f"model.n_heads ({m.n_heads}) is not a multiple of model.n_kv_heads ({m.n_kv})")
    if m.hd % 2:
        raise ConfigError(f"the head dimension ({m.hd}) must be even for rotary embeddings")
    if m.residual_dtype not in ("autocast", "fp32"):
        raise ConfigError(f"model.residual_dtype must be 'autocast' or 'fp32' (got {m.residual_dtype!r})")
    for w in m.sliding_window or []:
        if w != -1 and w <= 0:
            raise ConfigError(f"model.sliding_window entries must be positive or -1 for full attention (got {w})")
    if d.seq_len > m.max_seq_len:
        raise ConfigError(f"data.seq_len ({d.seq_len}) is longer than the model allows (model.max_seq_len = "
                          f"{m.max_seq_len}); lower data.seq_len or raise model.max_seq_len")
    unit = cfg.micro_batch_size * world_size
    if cfg.global_batch_size % unit:
        hint = _nearest_multiples(cfg.global_batch_size, unit)
        raise ConfigError(f"global_batch_size ({cfg.global_batch_size}) is not a multiple of micro_batch_size "
                          f"({cfg.micro_batch_size}) x devices ({world_size}); use {hint}")
    if cfg.hard_stop is not None and not 0 < cfg.hard_stop <= cfg.steps:
        raise ConfigError(f"hard_stop ({cfg.hard_stop}) must be between 1 and steps ({cfg.steps})")
    if not 0.0 <= d.val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must be in [0, 1) (got {d.val_fraction})")
    if d.dtype is not None and d.dtype not in ("uint16", "uint32"):
        raise ConfigError(f"data.dtype must be uint16 or uint32 (got '{d.dtype}')")
    if o.schedule not in SCHEDULES:
        raise ConfigError(f"optim.schedule '{o.schedule}' is not one of: {', '.join(SCHEDULES)}")
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1) (got {o.betas})")
    par = cfg.parallel
    if par.dp not in DP_MODES:
        raise ConfigError(f"parallel.dp '{par.dp}' is not one of: {', '.join(DP_MODES)}")
    if par.ac not in AC_MODES:
        raise ConfigError(f"parallel.ac '{par.ac}' is not one of: {', '.join(AC_MODES)}")
    if par.ac_every < 1:
        raise ConfigError(f"parallel.ac_every must be a positive number (got {par.ac_every})")
    if cfg.precision not in PRECISIONS:
        raise ConfigError(f"precision '{cfg.precision}' is not one of: {', '.join(PRECISIONS)}")
    if cfg.precision == "fp8" and m.fuse_projections:
        raise ConfigError("model.fuse_projections multiplies by concatenated bf16 weights, so it cannot combine with "
                          "precision fp8; set model.fuse_projections=false or precision bf16")
    from olmo.nn.attention import BACKENDS

    if m.attn_backend != "auto" and m.attn_backend not in BACKENDS:
        raise ConfigError(f"model.attn_backend '{m.attn_backend}' is not one of: auto, {', '.join(BACKENDS)}")


def check_vocab(model_vocab: int, tokenizer_vocab: int, where: str) -> None:
    """The embedding must hold every token id: the tokenizer's vocab, padded by fewer than 128 spare rows
    (OLMo pads 100278 to 100352, GPT-2's 50257 to 50304). Anything else means the wrong data or tokenizer."""
    if not tokenizer_vocab <= model_vocab < tokenizer_vocab + 128:
        raise ConfigError(f"Model vocab_size ({model_vocab}) does not match tokenizer vocab_size ({tokenizer_vocab}) "
                          f"of {where}; set model.vocab_size={padded_vocab(tokenizer_vocab)} (padded to a multiple "
                          f"of 128) or use the data made with the model's tokenizer")
