"""Training configuration: four dataclasses, named model sizes, and validation with one-line messages.

`TrainConfig` is the whole run: a `ModelConfig` (the network's shape), a `DataConfig` (token shards), an
`OptimConfig` (AdamW and the schedule) and the loop's own fields. Named sizes mirror OLMo-core's
`TransformerConfig.olmo2_*` / `olmo3_*` factories (src/olmo_core/nn/transformer/config.py), so
`ModelConfig.olmo2_1b()` has exactly the shape of OLMo-core's `olmo2_1B` and its weights convert 1:1.
Recipes (YAML or Python) and `--set a.b=c` overrides are turned into these objects by olmo/recipe.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from olmo.config_numbers import check_numbers, field_value
from olmo.errors import ConfigError as ConfigError  # re-exported: modules and recipes import it from here
from olmo_common.bounded.data import shown


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
    n_kv_heads: int | None = None
    """Key/value heads. None: as many as n_heads (MHA); fewer: grouped-query attention."""
    head_dim: int | None = None
    """Width of one head. None: d_model // n_heads."""
    mlp_hidden: int = 1536
    """SwiGLU width per branch (w1 and w3 each map d_model -> mlp_hidden)."""
    vocab_size: int = DOLMA2_PADDED_VOCAB
    """Embedding rows: the tokenizer's vocab, maybe padded to a multiple of 128."""
    max_seq_len: int = 4096
    """The longest sequence the model is configured for (the RoPE table's size)."""
    rope_theta: float = 500_000.0
    norm_eps: float = 1e-6
    qk_norm: bool = True
    """RMSNorm over the full projected q and k, before RoPE (OLMo 2)."""
    sliding_window: list[int] | None = None
    """Per-layer window pattern, repeated over the layers; -1 is full attention (OLMo 3)."""
    swa_full_first_layer: bool = False
    """Full attention on layer 0 instead of the pattern's first window (OLMo 3 keeps the pattern there)."""
    swa_full_last_layer: bool = True
    """Full attention on the last layer, whatever the pattern says (as OLMo 3 does)."""
    init_std: float = 0.02
    """Truncated normal (cut at 3 std) for every linear layer and the embedding."""
    z_loss_multiplier: float = 1e-5
    """The softmax auxiliary loss; 0 turns it off."""
    attn_backend: str = "auto"
    """auto: the fastest correct backend for these shapes on this GPU (olmo/nn/attention_choice.py), or a name in
    olmo.nn.attention.BACKENDS: sdpa, flash_attn, eager."""
    fuse_projections: bool = False
    """q/k/v and gate/up as one matmul each (same parameters, same math; with precision fp8, one float8 matmul
    whose scales cover the concatenated weights and outputs)."""
    residual_dtype: str = "autocast"
    """Under bf16 autocast, carry the residual stream in bf16 (as FSDP2 with bf16 params does, the way OLMo-core
    trains) rather than in fp32 (plain autocast keeps the fp32 embedding output): half the memory traffic of every
    norm and residual add. "fp32" keeps single-GPU autocast's behaviour. RMSNorm computes in fp32 either way."""

    @property
    def effective_n_kv_heads(self) -> int:
        """Key/value heads of the built model: n_kv_heads, or n_heads when that is None."""
        return self.n_kv_heads or self.n_heads

    @property
    def effective_head_dim(self) -> int:
        """Width of one head in the built model: head_dim, or d_model // n_heads when that is None."""
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
        d, head_dim, n_kv_heads = self.d_model, self.effective_head_dim, self.effective_n_kv_heads
        attn = d * head_dim * (self.n_heads * 2 + n_kv_heads * 2)  # w_q, w_out, w_k, w_v
        qk = (self.n_heads + n_kv_heads) * head_dim if self.qk_norm else 0
        block = attn + qk + 3 * d * self.mlp_hidden + 2 * d
        head = d * self.vocab_size + d
        return self.n_layers * block + head + (d * self.vocab_size if embeddings else 0)

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token as OLMo-core counts them: 6 x (block + head params) plus 12 x heads x
        head_dim x the attended length per layer (no causal halving; sliding layers count min(window, seq))."""
        per_position = 12 * self.n_heads * self.effective_head_dim
        attn = sum(per_position * min(self.window(i) or seq_len, seq_len) for i in range(self.n_layers))
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

    paths: list[str] = field(default_factory=list)
    """Shard folders (with a manifest.json), or .npy files and globs."""
    val_paths: list[str] = field(default_factory=list)
    """A separate validation split, if any."""
    val_fraction: float = 0.0
    """Without val_paths: hold out this share of the training sequences for eval."""
    seq_len: int = 4096
    """Tokens per training sequence (windows of the concatenated documents)."""
    seed: int = 0
    """The shuffling seed; the order of sequences is a function of (seed, epoch) only."""
    dtype: str | None = None
    """uint16 or uint32, only for shards without a manifest (e.g. `dolma tokens` output)."""
    vocab_size: int | None = None
    """The tokenizer's vocab, only for shards without a manifest."""


@dataclass
class OptimConfig:
    """AdamW plus a warmup-then-decay learning-rate schedule (OLMo 2/3 settings by default)."""

    lr: float = 4e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    weight_decay: float = 0.1
    """Applied to every parameter except the embedding, as OLMo-core's scripts do."""
    grad_clip: float = 1.0
    """The largest global gradient norm; 0 turns clipping off."""
    warmup_steps: int = 2000
    schedule: str = "cosine"
    """The decay after warmup: cosine, linear or constant."""
    final_lr_ratio: float = 0.1
    """The decay ends at lr x this."""
    fused: bool | None = None
    """torch's fused AdamW kernel, when compute_copies are not used. None: on for CUDA."""
    compute_copies: bool = True
    """One process, bf16 on a GPU: the optimizer keeps bf16 copies of the block weights for the forward and reads
    their bf16 gradients (olmo/optim/mixed_precision.py; same numbers, no per-step casts). Ignored under DDP/FSDP2."""


SCHEDULES = ("cosine", "linear", "constant")


@dataclass
class ParallelConfig:
    """How the model is spread over the processes `torchrun` starts, and what it recomputes to save memory.

    Data parallelism applies only when there is more than one process; activation checkpointing applies always."""

    dp: str = "fsdp"
    """fsdp: FSDP2, parameters, gradients and AdamW state sharded; ddp: replicated, gradients all-reduced."""
    ac: str = "none"
    """Activation checkpointing: none, full (every block), selective (every ac_every-th block) or auto (the fewest
    blocks that fit this GPU's memory with a margin, none when all fits; olmo/ac_plan.py)."""
    ac_every: int = 2
    """With ac=selective: checkpoint blocks 0, N, 2N, ... (N=2 saves about half the activations)."""
    reshard_after_forward: bool = True
    """fsdp: free the gathered parameters after forward (ZeRO-3); false keeps them until backward (ZeRO-2 style:
    one all-gather per step less, one block's full parameters more memory)."""
    sync_every_micro_batch: bool = False
    """Reduce gradients after every micro-batch instead of only the last one (less memory under fsdp with gradient
    accumulation, more communication)."""


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
    run_dir: str = "runs/olmo"
    """Where metrics.jsonl, config.yaml and checkpoints/ go."""
    steps: int = 1000
    """Optimizer steps; the schedule spans exactly this many."""
    hard_stop: int | None = None
    """Stop early at this step (e.g. a job's time limit) without changing the schedule."""
    global_batch_size: int = 64
    """Sequences per optimizer step, summed over devices and micro-batches."""
    micro_batch_size: int = 8
    """Sequences per forward/backward on one device."""
    seed: int = 0
    """Seeds the model's init and the torch, numpy and python RNGs."""
    init_from: str | None = None
    """Start from these weights (a checkpoint or run dir, e.g. from `olmo import-hf`); the step, optimizer and data
    order start fresh. Ignored once run_dir has its own checkpoint (--resume wins)."""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N."""
    precision: str = "auto"
    """auto (bf16 autocast on CUDA, fp32 on CPU), bf16, fp32, or fp8 (bf16 with the blocks' projections multiplied
    in float8 through torchao, on GPUs of compute capability 8.9+; olmo/nn/float8.py)."""
    compile: bool = False
    """torch.compile each block."""
    cuda_graph: bool = False
    """Replay each step as one CUDA graph (olmo/cuda_graph.py): no launch gaps. One process on a GPU with bf16 and
    optim.compute_copies only (ignored otherwise, with a warning); the first 3 steps run eagerly to warm up."""
    log_interval: int = 10
    """Steps between console lines and metrics.jsonl records."""
    eval_interval: int = 0
    """Steps between eval passes; 0: only at the end (when there is an eval split)."""
    eval_batches: int = 20
    """Micro-batches per eval pass."""
    save_interval: int = 1000
    """Steps between checkpoints (the final step is always saved)."""
    keep_last_n: int = 3
    """Checkpoints kept on disk; 0 keeps all."""
    wandb_project: str | None = None
    """Log to Weights & Biases too, when wandb is installed."""
    tensorboard: bool = False
    """Write TensorBoard events to run_dir/tb, when tensorboard is installed."""

    def grad_accum(self, world_size: int = 1) -> int:
        return self.global_batch_size // (self.micro_batch_size * world_size)

    @property
    def tokens_per_step(self) -> int:
        """Tokens in one optimizer step, over every device and micro-batch."""
        return self.global_batch_size * self.data.seq_len

    def flops_per_token(self) -> int:
        """Training FLOPs per token of this model at this run's sequence length (ModelConfig.flops_per_token)."""
        return self.model.flops_per_token(self.data.seq_len)

    def flops_per_step(self) -> int:
        """Training FLOPs of one optimizer step."""
        return self.flops_per_token() * self.tokens_per_step


def _nearest_multiples(n: int, unit: int) -> str:
    lo, hi = (n // unit) * unit, (n // unit + 1) * unit
    return f"{lo} or {hi}" if lo > 0 else str(hi)


def validate(cfg: TrainConfig, world_size: int = 1) -> None:
    """Raise ConfigError (one line, what to do) for a config that cannot train. Data-dependent checks (vocab
    against the tokenizer, enough tokens for a batch) happen when the shards are opened (olmo/data/loader.py).
    The checks run in this order, and the first refusal is the one reported."""
    check_numbers(cfg)  # NaN, infinity and out-of-range optimizer/model numbers, by field name
    _check_positive(cfg)
    _check_model_shape(cfg.model, cfg.data)
    _check_batches(cfg, world_size)
    _check_data_and_optim(cfg.data, cfg.optim)
    _check_parallel_and_precision(cfg)
    _check_attention_backend(cfg.model)
    _check_local_paths(cfg)
    _check_device(cfg.device)


def _check_device(device: str) -> None:
    """The device's spelling, checked here so `--dry-run` refuses what the run would (which devices exist is
    the run's own check, olmo.parallel.resolve_device)."""
    if re.fullmatch(r"auto|cpu|cuda(?::\d{1,3})?", device):
        return
    # torch's other device types (olmo.parallel.resolve_device says the same once torch is imported)
    if re.fullmatch(r"(?:mps|xla|meta|xpu|hpu|mtia|ipu|mkldnn|opengl|opencl|ideep|hip|ve|fpga|maia|lazy|vulkan|"
                    r"privateuseone)(?::\d{1,3})?", device):
        raise ConfigError(f"device {shown(device)} is not one olmo trains on; use auto, cpu, cuda or cuda:N")
    raise ConfigError(f"device {shown(device)} is not a torch device; use auto, cpu, cuda or cuda:N")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} '{value}' is not one of: {', '.join(choices)}")


def _check_positive(cfg: TrainConfig) -> None:
    for name in ("model.d_model", "model.n_layers", "model.n_heads", "model.mlp_hidden", "model.vocab_size",
                 "data.seq_len", "steps", "micro_batch_size", "global_batch_size", "log_interval", "save_interval"):
        value = field_value(cfg, name)
        if value <= 0:
            raise ConfigError(f"{name} must be a positive number (got {value})")


def _check_model_shape(model: ModelConfig, data: DataConfig) -> None:
    if model.head_dim is None and model.d_model % model.n_heads:
        raise ConfigError(f"model.d_model ({model.d_model}) is not divisible by model.n_heads ({model.n_heads}); "
                          "change one of them or set model.head_dim")
    if model.n_heads % model.effective_n_kv_heads:
        raise ConfigError(f"model.n_heads ({model.n_heads}) is not a multiple of model.n_kv_heads "
                          f"({model.effective_n_kv_heads})")
    if model.effective_head_dim % 2:
        raise ConfigError(f"the head dimension ({model.effective_head_dim}) must be even for rotary embeddings")
    if model.residual_dtype not in ("autocast", "fp32"):
        raise ConfigError(f"model.residual_dtype must be 'autocast' or 'fp32' (got {shown(model.residual_dtype)})")
    for w in model.sliding_window or []:
        if w != -1 and w <= 0:
            raise ConfigError(f"model.sliding_window entries must be positive or -1 for full attention (got {w})")
    if data.seq_len > model.max_seq_len:
        raise ConfigError(f"data.seq_len ({data.seq_len}) is longer than the model allows (model.max_seq_len = "
                          f"{model.max_seq_len}); lower data.seq_len or raise model.max_seq_len")


def _check_batches(cfg: TrainConfig, world_size: int) -> None:
    unit = cfg.micro_batch_size * world_size
    if cfg.global_batch_size % unit:
        hint = _nearest_multiples(cfg.global_batch_size, unit)
        raise ConfigError(f"global_batch_size ({cfg.global_batch_size}) is not a multiple of micro_batch_size "
                          f"({cfg.micro_batch_size}) x devices ({world_size}); use {hint}")
    if cfg.hard_stop is not None and not 0 < cfg.hard_stop <= cfg.steps:
        raise ConfigError(f"hard_stop ({cfg.hard_stop}) must be between 1 and steps ({cfg.steps})")


def _check_data_and_optim(data: DataConfig, optim: OptimConfig) -> None:
    if not 0.0 <= data.val_fraction < 1.0:
        raise ConfigError(f"data.val_fraction must be in [0, 1) (got {data.val_fraction})")
    if data.dtype is not None and data.dtype not in ("uint16", "uint32"):
        raise ConfigError(f"data.dtype must be uint16 or uint32 (got '{data.dtype}')")
    _check_choice("optim.schedule", optim.schedule, SCHEDULES)
    if len(optim.betas) != 2 or not all(0 <= b < 1 for b in optim.betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1) (got {optim.betas})")


def _check_parallel_and_precision(cfg: TrainConfig) -> None:
    par = cfg.parallel
    _check_choice("parallel.dp", par.dp, DP_MODES)
    _check_choice("parallel.ac", par.ac, AC_MODES)
    if par.ac_every < 1:
        raise ConfigError(f"parallel.ac_every must be a positive number (got {par.ac_every})")
    _check_choice("precision", cfg.precision, PRECISIONS)


def _check_attention_backend(model: ModelConfig) -> None:
    from olmo.nn.attention import BACKENDS  # lazily: it imports torch

    _check_choice("model.attn_backend", model.attn_backend, ("auto", *BACKENDS))


def _check_local_paths(cfg: TrainConfig) -> None:
    """A URL where a path goes (`run_dir: s3://bucket/run`) is refused: olmo would write a local `s3:` folder; so is
    an empty one, which would be the working folder."""
    from olmo.fsutil import check_local

    named = [("run_dir", cfg.run_dir), ("init_from", cfg.init_from)]
    named += [("data.paths", p) for p in cfg.data.paths] + [("data.val_paths", p) for p in cfg.data.val_paths]
    for name, value in named:
        if value is not None and not str(value).strip():
            # an unset shell variable (`--set run_dir=$RUN`): never the working folder, which holds other files
            raise ConfigError(f"{name} is empty; give a folder (e.g. runs/my-run)"
                              + (", or leave init_from out" if name == "init_from" else ""))
        if value is not None:
            check_local(value, name)


def check_vocab(model_vocab: int, tokenizer_vocab: int, where: str) -> None:
    """The embedding must hold every token id: the tokenizer's vocab, padded by fewer than 128 spare rows
    (OLMo pads 100278 to 100352, GPT-2's 50257 to 50304). Anything else means the wrong data or tokenizer."""
    if not tokenizer_vocab <= model_vocab < tokenizer_vocab + 128:
        raise ConfigError(f"Model vocab_size ({model_vocab}) does not match tokenizer vocab_size ({tokenizer_vocab}) "
                          f"of {where}; set model.vocab_size={padded_vocab(tokenizer_vocab)} (padded to a multiple "
                          f"of 128) or use the data made with the model's tokenizer")
