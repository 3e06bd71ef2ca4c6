"""Does `precision: fp8` learn what bf16 learns? Two runs of the trainer's step from one init on one stream of data.

The data is an endless stream drawn from a bigram model of the bundled corpus (its tokens, counted, add-0.1
smoothed), so there is no data to memorise, every batch is new, and the best any model can do is known: the
bigram model's entropy rate, printed as the floor. Each precision trains the same model (an OLMo 2 block stack,
d_model 1024, 8 layers, 8 heads, SwiGLU 4096: every projection a float8 candidate) from the same seed on the same
batches with the trainer's step (olmo.train.train_step: compiled blocks, bf16 copies or float8 projections, fused
AdamW, clipping, the cosine schedule), on one GPU.

Prints the loss every 25 steps for both, the mean over the last 50 steps, and their relative difference; exits 1
when the difference is above --tolerance (default 1%: a run-to-run seed change moves this mean by ~0.3%; a float8
scale bug, e.g. a missing amax, sends the loss up by whole nats or to NaN).

    python3 bench/fp8_loss.py [--steps 400] [--tolerance 0.01]
    python3 bench/fp8_loss.py --device cpu --steps 20 --batch 4 --seq 64 --d-model 128 --layers 2   # smoke
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from olmo import parallel  # noqa: E402
from olmo.config import ModelConfig, OptimConfig, TrainConfig  # noqa: E402
from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH  # noqa: E402
from olmo.data.prepare import load_tokenizer  # noqa: E402
from olmo.optim.optimizer import build_optimizer, lr_at  # noqa: E402
from olmo.train import RunState, train_step  # noqa: E402

VOCAB = 768


def bigram_table(device: torch.device) -> tuple[torch.Tensor, float]:
    """Row-stochastic (V, V) next-token probabilities from the bundled corpus, and their entropy rate in nats."""
    tok = load_tokenizer(TOKENIZER_PATH)
    with gzip.open(CORPUS_PATH, "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    counts = torch.full((VOCAB, VOCAB), 0.1, dtype=torch.float64)
    for ids in tok.encode(texts):
        t = torch.tensor(ids)
        counts.index_put_((t[:-1], t[1:]), torch.ones(len(t) - 1, dtype=torch.float64), accumulate=True)
    probs = counts / counts.sum(1, keepdim=True)
    stationary = counts.sum(1) / counts.sum()
    entropy = float(-(stationary[:, None] * probs * probs.log()).sum())
    return probs.float().to(device), entropy


def stream(probs: torch.Tensor, batch: int, seq: int, seed: int) -> list[torch.Tensor]:
    """`batch` sequences of `seq` tokens walked through the bigram chain (same seed, same batches)."""
    gen = torch.Generator(device=probs.device).manual_seed(seed)
    cur = torch.randint(0, VOCAB, (batch,), generator=gen, device=probs.device)
    out = [cur]
    for _ in range(seq - 1):
        cur = torch.multinomial(probs[cur], 1, generator=gen).squeeze(1)
        out.append(cur)
    return [torch.stack(out, 1).cpu()]


def run(precision: str, a: argparse.Namespace, probs: torch.Tensor) -> list[float]:
    device = torch.device(a.device)
    model_cfg = ModelConfig(d_model=a.d_model, n_layers=a.layers, n_heads=a.d_model // 128,
                            mlp_hidden=4 * a.d_model, vocab_size=VOCAB,
                            max_seq_len=a.seq, attn_backend="sdpa")
    optim = OptimConfig(lr=a.lr, warmup_steps=a.steps // 10)
    cfg = TrainConfig(model=model_cfg, optim=optim, micro_batch_size=a.batch, global_batch_size=a.batch,
                      device=a.device, precision=precision, compile=device.type == "cuda", steps=a.steps,
                      seed=a.seed)
    cfg.data.seq_len = a.seq
    world = parallel.World()
    model = parallel.build_parallel_model(cfg, world, device, None)
    amp = parallel.autocast_dtype(cfg, device, world)
    opt = build_optimizer(model, cfg.optim, device, copies_dtype=amp)
    state = RunState(cfg, world, device, amp, model, opt, None, [])  # type: ignore[arg-type]
    losses = []
    for step in range(a.steps):
        batch = stream(probs, a.batch, a.seq, seed=10_000 + step)
        loss, _ = train_step(state, batch, lr_at(step, a.steps, cfg.optim))
        losses.append(float(loss))
    return losses


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--d-model", type=int, default=1024, help="heads of 128, SwiGLU 4 x d_model")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--device", default="cuda", help="cpu: a slow smoke run of this script (float8 matmuls exist there)")
    a = p.parse_args()
    probs, floor = bigram_table(torch.device(a.device))
    curves = {prec: run(prec, a, probs) for prec in ("bf16", "fp8")}
    print(f"bigram floor (entropy rate): {floor:.4f} nats; start ln(V) = {math.log(VOCAB):.4f}")
    print("| step | bf16 | fp8 | rel diff |\n|---|---|---|---|")
    for i in [*range(0, a.steps, 25), a.steps - 1]:
        b, f = curves["bf16"][i], curves["fp8"][i]
        print(f"| {i + 1} | {b:.4f} | {f:.4f} | {(f - b) / b:+.2e} |")
    tail = min(50, a.steps)
    mb, mf = (sum(c[-tail:]) / tail for c in (curves["bf16"], curves["fp8"]))
    rel = (mf - mb) / mb
    ok = math.isfinite(mf) and abs(rel) <= a.tolerance
    print(f"mean of the last {tail} steps: bf16 {mb:.4f}, fp8 {mf:.4f} ({rel:+.2%}; tolerance {a.tolerance:.2%}): "
          f"{'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
