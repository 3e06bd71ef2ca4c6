"""Training metrics: tokens per second, model FLOPs utilisation against the right peak per GPU, and where metrics
are written (console, `metrics.jsonl`, and wandb / TensorBoard when installed and asked for)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from olmo.errors import OlmoError
from olmo.terminal import plain
from olmo_common.bounded.files import read_lines

# Dense (no 2:4 sparsity) BF16 tensor-core peak, TFLOP/s, matched against torch.cuda.get_device_name().
# First match wins, so the specific names come before the general ones.
# Sources: NVIDIA datasheets list the sparse figure; dense is half of it.
#   H100 SXM 1,979 sparse -> 989.5; H100 NVL 1,671 -> 835.5; H100 PCIe 1,513 -> 756.5 (H100 datasheet; the same
#     three values are in OLMo-core train/callbacks/speed_monitor.py).
#   H200 SXM 1,979 sparse -> 989.5; H200 NVL 1,671 -> 835.5 (H200 datasheet). OLMo-core has no H200 entry
#     and falls back to the A100 peak, overstating MFU 3.2x (speed_monitor.py as above).
#   GH200: the H100-class Hopper GPU, 989.5 (GH200 datasheet: 1,979 sparse).
#   B200 2,250 dense (OLMo-core speed_monitor.py; B200 datasheet 4.5 PFLOPS sparse per GPU in HGX B200).
#   A100 312 dense (A100 datasheet, SXM and PCIe). A10 125 dense (A10 datasheet, 250 sparse; not the A10G).
#   L40S 362.05 dense (L40S datasheet, 733 sparse). L4 121 dense (L4 datasheet, 242 sparse).
#   RTX PRO 6000 504 (OLMo-core 3.0 speed_monitor.py).
PEAK_BF16_TFLOPS: list[tuple[str, float]] = [
    (r"GH200", 989.5),
    (r"H200.*NVL", 835.5),
    (r"H200", 989.5),
    (r"H100.*NVL", 835.5),
    (r"H100.*PCIe", 756.5),
    (r"H100", 989.5),
    (r"B200", 2250.0),
    (r"A100", 312.0),
    (r"\bA10\b", 125.0),
    (r"L40S", 362.05),
    (r"\bL4\b", 121.0),
    (r"RTX PRO 6000", 504.0),
]


def peak_flops(device_name: str) -> float | None:
    """Dense BF16 peak FLOP/s of a GPU by its name, or None when unknown (then MFU is not reported)."""
    for pattern, tflops in PEAK_BF16_TFLOPS:
        if re.search(pattern, device_name):
            return tflops * 1e12
    return None


def mfu(tokens_per_s: float, flops_per_token: int, peak: float | None, n_devices: int = 1) -> float | None:
    if not peak:
        return None
    return tokens_per_s * flops_per_token / (peak * n_devices)


class Throughput:
    """Tokens per second of a training loop, with eval and checkpoint time (`paused`) kept out: per logged window
    (the console line and metrics.jsonl) and over the whole run, where the first step, which pays for warm-up, is
    left out when there are more."""

    def __init__(self, tokens_per_step: int):
        self.tokens_per_step = tokens_per_step
        self.start = self.window_start = time.perf_counter()
        self.window_steps = 0
        self.first_done: float | None = None  # when the first step finished
        self.window_paused = self.total_paused = 0.0
        self.last_rate = 0.0  # tokens/s of the last closed window (0 until one is)

    def step_done(self) -> None:
        self.window_steps += 1
        if self.first_done is None:
            self.first_done = time.perf_counter()

    def close_window(self) -> float:
        """Tokens/s since the last window closed; a new window starts."""
        now = time.perf_counter()
        busy = now - self.window_start - self.window_paused
        self.last_rate = self.window_steps * self.tokens_per_step / max(busy, 1e-9)
        self.window_start, self.window_steps, self.window_paused = now, 0, 0.0
        return self.last_rate

    def eta(self, steps_left: int) -> float:
        """Seconds the remaining steps take at the last window's rate."""
        return steps_left * self.tokens_per_step / max(self.last_rate, 1e-9)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside is not training time (an eval pass, a checkpoint save)."""
        started = time.perf_counter()
        yield
        spent = time.perf_counter() - started
        self.window_paused += spent
        self.total_paused += spent

    def run_totals(self, steps_done: int) -> tuple[float, float]:
        """(seconds since the start, mean tokens/s over the run's steps but the first)."""
        seconds = time.perf_counter() - self.start
        if steps_done > 1 and self.first_done is not None:
            busy = time.perf_counter() - self.first_done - self.total_paused
            return seconds, (steps_done - 1) * self.tokens_per_step / max(busy, 1e-9)
        if steps_done == 1:
            return seconds, self.tokens_per_step / max(seconds, 1e-9)
        return seconds, 0.0


WANDB_RUN_ID = "wandb_run_id"  # in run_dir: the W&B run this run logs to, so that --resume continues that run
_WANDB_ID_RE = re.compile(r"^[a-z0-9]{1,64}$")


def wandb_run_id(run_dir: Path, resume: bool, warn: Any = print) -> str:
    """The W&B run id for this run: on --resume the one run_dir/wandb_run_id keeps (W&B then continues that run,
    wandb.init(id=..., resume="allow")), else a new one, written there. The file is data: anything but an id in it
    starts a new W&B run, with a warning."""
    from olmo.fsutil import atomic_write_bytes, read_small

    path = run_dir / WANDB_RUN_ID
    if resume and path.is_file():
        try:
            text = read_small(path, "run id").decode("ascii").strip()
        except (OSError, ValueError):  # unreadable, too long, or not ASCII
            text = ""
        if _WANDB_ID_RE.match(text):
            return text
        warn(f"{plain(path)} does not hold a W&B run id; logging to a new W&B run")
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"  # W&B's own ids: 8 of these
    run_id = "".join(secrets.choice(alphabet) for _ in range(8))
    atomic_write_bytes(path, f"{run_id}\n".encode())
    return run_id


class MetricsLog:
    """Appends one JSON object per record to run_dir/metrics.jsonl and forwards to optional sinks."""

    def __init__(self, run_dir: Path, config: dict[str, Any], wandb_project: str | None = None,
                 tensorboard: bool = False, warn: Any = print, resume: bool = False):
        self.path = run_dir / "metrics.jsonl"
        # Open for the whole run (closed in close()); line-buffered: a killed run keeps every finished line.
        # O_NOFOLLOW: a metrics.jsonl planted as a symlink (to ~/.bashrc) must not be appended to through it
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OlmoError(f"{self.path} is a symlink; olmo appends its metrics to a plain file there, so it "
                                "refuses to follow it (remove the link)") from None
            raise
        self.file = os.fdopen(fd, "a", buffering=1)
        self.wandb: Any = None
        self.tb: Any = None
        if wandb_project:
            try:
                import wandb

                self.wandb = wandb.init(project=wandb_project, dir=str(run_dir), config=config, name=run_dir.name,
                                        id=wandb_run_id(run_dir, resume, warn), resume="allow")
            except Exception as e:  # not installed, or not logged in: training goes on without it
                warn(f"wandb logging is off: {type(e).__name__}: {plain(e)}")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tb"))
            except Exception as e:
                warn(f"TensorBoard logging is off ({type(e).__name__}: {plain(e)}); pip install tensorboard")

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self.file.write(json.dumps(record) + "\n")
        step = record.get("step")
        scalars = {k: v for k, v in record.items() if isinstance(v, int | float) and k not in ("step", "time")}
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        self.file.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl, streamed (a line longer than any record is refused as not JSON)."""
    return [json.loads(line) for line in read_lines(path, "metrics line") if line.strip()]
