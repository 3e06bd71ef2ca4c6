"""`parallel.ac: auto`: checkpoint only as many blocks as the GPU's memory needs, none when everything fits.

Recomputing a block costs about a third of its forward+backward time, so checkpointing every block to be safe
throws away speed whenever the activations would have fitted (OLMo 3 7B on 141 GB H200s: 84.6 GB per GPU with no
checkpointing). The plan estimates, per GPU:

    static   = parameters x bytes per parameter (fp32 master + fp32 grads + two AdamW moments = 16, divided over
               the ranks under FSDP2; + 4 for the one-GPU bf16 weight copies and their grads)
               + the loss's logits chunk and the embedding output
    block    = activations one block saves for backward, per token:
               ACT_ELEMS_PER_TOKEN(d, mlp, heads) elements of the compute dtype
    ckpt     = what a checkpointed block still keeps: its input, d elements per token

and checkpoints the fewest blocks k with static + (n - k) x block + k x ckpt <= (1 - MARGIN) x memory - RESERVE.
The per-block count was calibrated on the OLMo 3 7B shape (2x H200, FSDP2, compiled blocks, batch 1 x 8192):
no checkpointing 84.6 GB, every 2nd block 68.5 GB, every block 56.7 GB per GPU, i.e. 0.94-1.0 GB per block;
the formula gives 1.01 GB there, slightly over, which errs towards fitting.
"""

from __future__ import annotations

from dataclasses import dataclass

from olmo.config import ModelConfig

MARGIN = 0.10  # of the GPU's memory: allocator fragmentation, cuBLAS/NCCL workspaces, compile-time spikes
RESERVE_BYTES = 2 * 1024**3  # CUDA context and kernels' own memory, outside torch's allocator
LOSS_CHUNK_BYTES = 2 * 1024**3  # olmo.nn.loss sizes its logits chunk to about 2 GiB (fp32)


def act_elems_per_token(cfg: ModelConfig) -> int:
    """Elements one block saves per token for backward: its input and the two norms' inputs and residual (4 x d),
    the three SwiGLU tensors (3 x mlp: w1 and w3 outputs, their product into w2), and q, k, v (after QK-norm and
    RoPE, read by the attention backward)."""
    return 4 * cfg.d_model + 3 * cfg.mlp_hidden + (cfg.n_heads + 2 * cfg.effective_n_kv_heads) * cfg.effective_head_dim


@dataclass(frozen=True)
class AcPlan:
    blocks: tuple[int, ...]  # indices of the blocks to checkpoint
    block_bytes: int  # activations of one block, not checkpointed
    static_bytes: int  # parameters, gradients, optimizer state, loss chunk
    need_bytes: int  # the estimate with this plan
    budget_bytes: int  # what the plan may use

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.budget_bytes

    def checkpointing_line(self, n_layers: int) -> str:
        """The log line saying which blocks the plan checkpoints and the memory it expects them to take."""
        gb = 1024**3
        what = ("none" if not self.blocks else "every block" if len(self.blocks) == n_layers
                else f"{len(self.blocks)} of {n_layers} blocks")
        note = "" if self.fits else "; even checkpointing every block may not fit: lower micro_batch_size"
        return (f"activation checkpointing (auto): {what}; estimated {self.need_bytes / gb:.1f} GB of "
                f"{self.budget_bytes / gb:.1f} GB usable ({self.block_bytes / gb:.2f} GB per block){note}")


def plan_ac(cfg: ModelConfig, batch: int, seq: int, memory_bytes: int, dtype_bytes: int = 2, world_size: int = 1,
            fsdp: bool = False, compute_copies: bool = False) -> AcPlan:
    """The fewest checkpointed blocks that fit `memory_bytes` per GPU (see the module docstring)."""
    tokens = batch * seq
    params = cfg.num_params()
    per_param = 16 / world_size if fsdp else 16.0
    if compute_copies and not fsdp:
        per_param += 4
    static = int(params * per_param) + LOSS_CHUNK_BYTES + 2 * tokens * cfg.d_model * 4  # + embedding out, fp32
    block = tokens * act_elems_per_token(cfg) * dtype_bytes
    kept = tokens * cfg.d_model * dtype_bytes
    budget = int(memory_bytes * (1 - MARGIN)) - RESERVE_BYTES
    n = cfg.n_layers
    k = 0
    while k < n and static + (n - k) * block + k * kept > budget:
        k += 1
    # the first k blocks: their activations would be held longest (from their forward to the end of backward)
    return AcPlan(tuple(range(k)), block, static, static + (n - k) * block + k * kept, budget)
