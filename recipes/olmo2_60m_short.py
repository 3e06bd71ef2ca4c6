"""A Python recipe: a function that returns a full TrainConfig. Variants call another recipe and change fields.

    olmo train recipes/olmo2_60m_short.py --set data.paths=[data/tokens]
    olmo train olmo2_60m_short:cpu_debug
"""

from __future__ import annotations

from olmo.config import TrainConfig
from olmo.recipe import load_recipe


def olmo2_60m_short() -> TrainConfig:
    """The olmo2_60m recipe cut to 200 steps with a short warmup: a quick check of a new dataset."""
    cfg = load_recipe("olmo2_60m")
    cfg.steps, cfg.optim.warmup_steps, cfg.save_interval = 200, 20, 100
    cfg.run_dir = "runs/olmo2_60m_short"
    return cfg


def cpu_debug() -> TrainConfig:
    """Four layers, short sequences, fp32 on the CPU: for stepping through the trainer in a debugger."""
    cfg = olmo2_60m_short()
    cfg.model.n_layers, cfg.data.seq_len, cfg.global_batch_size, cfg.micro_batch_size = 4, 256, 8, 4
    cfg.device, cfg.steps, cfg.log_interval = "cpu", 20, 1
    cfg.run_dir = "runs/olmo2_60m_cpu_debug"
    return cfg
