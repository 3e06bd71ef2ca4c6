"""One torchrun rank of the all-reduce probe. Rank 0 prints one JSON line with the measurements.

busbw follows nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time, busbw = algbw * 2(n-1)/n for all-reduce,
so it can be compared with the link's bandwidth whatever the number of GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def measure(sizes_mb: list[int], iters: int, device: torch.device) -> list[dict[str, float]]:
    n = dist.get_world_size()
    results = []
    for mb in sizes_mb:
        x = torch.ones(mb * 2**20 // 4, dtype=torch.float32, device=device)
        for _ in range(3):
            dist.all_reduce(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        dt = (time.perf_counter() - start) / iters
        algbw = x.numel() * 4 / dt / 1e9
        # correctness: every element is n ** (3 + iters) after repeated sums of ones
        expected = float(n) ** (3 + iters)
        ok = bool(torch.allclose(x[:8].float().cpu(), torch.full((8,), expected), rtol=1e-3))
        results.append({"size_mb": mb, "time_ms": round(dt * 1e3, 3), "algbw_gbps": round(algbw, 2),
                        "busbw_gbps": round(algbw * 2 * (n - 1) / n, 2), "correct": ok})
        del x
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--sizes-mb", default="8,64,2048")
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    dist.init_process_group(args.backend)
    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    else:
        device = torch.device("cpu")
    sizes = [int(s) for s in args.sizes_mb.split(",") if s]
    results = measure(sizes, args.iters, device)
    if dist.get_rank() == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if args.backend == "nccl" else None
        print("OLMO_DOCTOR_NCCL " + json.dumps({"world": dist.get_world_size(), "backend": args.backend,
                                                "nccl": nccl, "results": results}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
