"""Beyond two GPUs, on paper: OLMo 3 7B and 32B on 8 and 64 H200s with FSDP2 or HSDP, from measured figures.

    python bench/scale_model.py            # the table for bench/RESULTS.md
    python bench/scale_model.py --json     # every number

Pure Python (no torch, no GPU). Per GPU and per optimizer step, for a micro-batch of 1 x 8192 tokens per GPU:

- compute: tokens x FLOPs per token (OLMo-core's count, olmo.config) / (989 TFLOP/s x the MFU our trainer
  measured for all 32 layers of OLMo 3 7B under FSDP2 on 2x H200: 0.514 in bf16, where the communication was
  hidden; fp8 scaled by the one-GPU fp8/bf16 ratio, 0.714/0.579; bench/RESULTS.md), plus a third of the
  checkpointed blocks' share when activation checkpointing is needed (their forward runs twice). The 2-GPU row
  reproduces that run by construction; what the larger rows add is the communication and memory;
- communication (bytes per GPU on the wire, ring algorithms: (n-1)/n of the data): FSDP2 all-gathers the bf16
  parameters in forward and again in backward (reshard_after_forward) and reduce-scatters fp32 gradients; HSDP
  shards within a node of 8 (NVLink) and all-reduces each node's gradient shard across nodes. Bandwidths: the
  all-reduce bus bandwidth measured between two H200s over NVLink here (341 GB/s, bench/RESULTS.md `check
  --nccl`), and 8 x 400 Gb/s InfiniBand per node between nodes (50 GB/s per GPU; 43 GB/s bus bandwidth at the
  same 86% efficiency as NVLink: an assumption, no multi-node run here). A flat FSDP2 group spanning nodes runs
  at the slower link;
- the step: FSDP2 prefetches the next block's parameters while one computes, so the step is the larger of
  compute and communication plus one block's communication that cannot overlap (the first gather, the last
  reduce);
- memory: 16 bytes per parameter (fp32 master, grads, two AdamW moments) over the shard group, two gathered bf16
  blocks, the activations olmo.ac_plan counts per block (calibrated at 0.94-1.0 GB per block for this shape),
  the loss chunk; blocks are checkpointed (fewest first) until it fits 90% of 141 GB, as `parallel.ac: auto`.

Published OLMo-core throughput is on H100s (same 989 TFLOP/s bf16 peak as the H200; less memory): the OLMo 3
technical report (arXiv:2512.13961) gives 7,700 tokens/s per GPU for the 7B and 1,900 for the 32B pretraining
(as quoted by https://muxup.com/2025q4/minipost-olmo3-training-cost), and OLMo-core's README (PyPI ai2-olmo-core
1.5.0) 10,000 (bf16) and 13,000 (fp8) tokens/s per GPU for OLMo 2 7B at 4096 tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from olmo.ac_plan import act_elems_per_token
from olmo.config import ModelConfig

PEAK_FLOPS = 989e12  # H200 (= H100 SXM) dense bf16, the MFU denominator everywhere in bench/
GPU_BYTES = 141e9
USABLE = 0.90  # of GPU memory, as olmo.ac_plan's margin
# ours, OLMo 3 7B, 32 layers, FSDP2 on 2x H200 (bf16, measured); fp8 x the one-GPU fp8/bf16 ratio 0.714/0.579
MFU_FSDP = {"bf16": 0.514, "fp8": 0.514 * 0.714 / 0.579}
MEASURED_2GPU = 10289  # tokens/s per GPU of that run
MICRO_BATCH = {"olmo3_7b": 2, "olmo3_32b": 1}  # sequences of 8192 per GPU, as OLMo-core's official OLMo 3 scripts
NVLINK_BUSBW = 341e9  # all-reduce bus bandwidth, 2x H200 over NVLink, measured (check --nccl)
IB_BUSBW = 43e9  # per GPU between nodes: 400 Gb/s NIC per GPU at the NVLink run's 86% efficiency (assumed)
GPUS_PER_NODE = 8
PUBLISHED = {  # OLMo-core's published tokens/s per GPU (H100): (figure, where)
    "olmo3_7b": (7700, "OLMo 3 report, 7B pretraining"),
    "olmo3_32b": (1900, "OLMo 3 report, 32B pretraining"),
}


@dataclass(frozen=True)
class Setup:
    model: str
    gpus: int
    dp: str  # fsdp | hsdp
    precision: str  # bf16 | fp8
    seq: int = 8192
    micro_batch: int = 0  # 0: the official scripts' (MICRO_BATCH)

    @property
    def batch(self) -> int:
        return self.micro_batch or MICRO_BATCH[self.model]


@dataclass(frozen=True)
class Estimate:
    setup: Setup
    compute_s: float
    comm_s: float
    step_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    memory_gb: float
    checkpointed_blocks: int
    bound: str


def _config(name: str) -> ModelConfig:
    cfg: ModelConfig = getattr(ModelConfig, name)()
    cfg.vocab_size = 100352
    return cfg


def _ring(nbytes: float, n: int, busbw: float) -> float:
    """Seconds for an all-gather or reduce-scatter of `nbytes` (the whole tensor) over n ranks."""
    return 0.0 if n <= 1 else nbytes * (n - 1) / n / busbw


def comm_seconds(params: int, s: Setup) -> float:
    """Communication per step and GPU (bf16 gathers twice, fp32 gradient reduce; float8 halves the gathers when
    the weights are gathered in float8, which this model does not assume)."""
    gathers, reduce = 2 * 2 * params, 4 * params
    if s.dp == "fsdp":
        busbw = NVLINK_BUSBW if s.gpus <= GPUS_PER_NODE else IB_BUSBW
        return _ring(gathers + reduce, s.gpus, busbw)
    shard = min(s.gpus, GPUS_PER_NODE)
    nodes = s.gpus // shard
    within = _ring(gathers + reduce, shard, NVLINK_BUSBW)
    across = 2 * _ring(reduce / shard, nodes, IB_BUSBW)  # all-reduce = reduce-scatter + all-gather
    return within + across


def memory_bytes(cfg: ModelConfig, s: Setup, checkpointed: int) -> float:
    shard = s.gpus if s.dp == "fsdp" else min(s.gpus, GPUS_PER_NODE)
    params = cfg.num_params()
    block_params = (cfg.num_params(embeddings=False) - cfg.d_model * (cfg.vocab_size + 1)) / cfg.n_layers
    tokens = s.batch * s.seq
    block_act = tokens * act_elems_per_token(cfg) * 2
    kept = tokens * cfg.d_model * 2
    static = 16 * params / shard + 2 * 2 * block_params + 2 * 1024**3 + 2 * tokens * cfg.d_model * 4
    n = cfg.n_layers
    return static + (n - checkpointed) * block_act + checkpointed * kept


def estimate(s: Setup) -> Estimate:
    cfg = _config(s.model)
    k = 0
    while k < cfg.n_layers and memory_bytes(cfg, s, k) > USABLE * GPU_BYTES:
        k += 1
    tokens = s.batch * s.seq
    flops = cfg.flops_per_token(s.seq)
    compute = tokens * flops / (PEAK_FLOPS * MFU_FSDP[s.precision]) * (1 + k / cfg.n_layers / 3)
    comm = comm_seconds(cfg.num_params(), s)
    step = max(compute, comm) + comm / cfg.n_layers
    tps = tokens / step
    return Estimate(s, compute, comm, step, tps, tps * flops / PEAK_FLOPS, memory_bytes(cfg, s, k) / 1e9, k,
                    "communication" if comm > compute else "compute")


CALIBRATION = Setup("olmo3_7b", 2, "fsdp", "bf16", micro_batch=1)  # the measured 2-GPU run
SETUPS = [CALIBRATION] + [Setup(m, g, dp, p) for m in ("olmo3_7b", "olmo3_32b") for g in (8, 64)
                          for dp in ("fsdp", "hsdp") for p in ("bf16", "fp8") if not (g == 8 and dp == "hsdp")]


def table(rows: list[Estimate]) -> str:
    lines = ["| model | H200s | data parallel | precision | batch per GPU | compute s | comm s | step s | "
             "tokens/s/GPU | MFU | memory GB/GPU (ckpt blocks) | bound | vs OLMo-core published |", "|---" * 13 + "|"]
    for e in rows:
        s = e.setup
        pub, _ = PUBLISHED[s.model]
        lines.append(f"| {s.model} | {s.gpus} | {s.dp} | {s.precision} | {s.batch} x {s.seq} | {e.compute_s:.3f} | "
                     f"{e.comm_s:.3f} | "
                     f"{e.step_s:.3f} | {e.tokens_per_s_per_gpu:,.0f} | {e.mfu:.3f} | {e.memory_gb:.0f} "
                     f"({e.checkpointed_blocks}) | {e.bound} | {e.tokens_per_s_per_gpu / pub:.2f}x |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = [estimate(s) for s in SETUPS]
    if a.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(table(rows))
        cal = rows[0].tokens_per_s_per_gpu
        print(f"\n2-GPU row: {cal:,.0f} tokens/s/GPU modelled vs {MEASURED_2GPU:,} measured "
              f"({cal / MEASURED_2GPU:.2f})")
        print("OLMo-core published (H100, tokens/s per GPU): " +
              "; ".join(f"{k} {v:,} ({w})" for k, (v, w) in PUBLISHED.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
