"""MFU peaks per GPU name, the schedule, the optimizer groups, and the bundled assets."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from olmo.config import ModelConfig, OptimConfig
from olmo.data.corpus import ASSET_DOCS, CORPUS_PATH, TOKENIZER_PATH, documents
from olmo.metrics import mfu, peak_flops
from olmo.model import build_model
from olmo.optim.optimizer import build_optimizer, lr_at


@pytest.mark.parametrize(("name", "tflops"), [
    ("NVIDIA H200", 989.5),  # OLMo-core would use the A100's 312 here
    ("NVIDIA H200 NVL", 835.5),
    ("NVIDIA GH200 480GB", 989.5),
    ("NVIDIA H100 80GB HBM3", 989.5),
    ("NVIDIA H100 PCIe", 756.5),
    ("NVIDIA H100 NVL", 835.5),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0),
    ("NVIDIA A10", 125.0),
    ("NVIDIA L40S", 362.05),
    ("NVIDIA L4", 121.0),
    ("NVIDIA B200", 2250.0),
])
def test_peak_per_gpu(name: str, tflops: float) -> None:
    assert peak_flops(name) == tflops * 1e12


def test_unknown_gpu_has_no_mfu() -> None:
    assert peak_flops("NVIDIA GeForce GTX 1080") is None and peak_flops("NVIDIA A10G") is None
    assert mfu(50_000, 10**10, None) is None
    # 54,652 tok/s on OLMo-core's olmo2_1B shape at seq 4096 on one H200 (bench/train_throughput.py): 56.9% MFU
    m = ModelConfig.olmo2_1b()
    assert round(mfu(54_652, m.flops_per_token(4096), peak_flops("NVIDIA H200")) or 0, 3) == 0.569


def test_schedule() -> None:
    cfg = OptimConfig(lr=1e-3, warmup_steps=10, final_lr_ratio=0.1)
    assert lr_at(0, 100, cfg) == pytest.approx(1e-4) and lr_at(9, 100, cfg) == pytest.approx(1e-3)
    # steps count from 1 as in OLMo-core: the peak is step index 9 alone, the decay starts at index 10, and the
    # last step (index 99) takes the final LR
    assert lr_at(10, 100, cfg) < 1e-3
    assert lr_at(54, 100, cfg) == pytest.approx(0.55e-3)  # cosine midpoint between 1e-3 and 1e-4
    assert lr_at(99, 100, cfg) == pytest.approx(1e-4) and lr_at(100, 100, cfg) == pytest.approx(1e-4)
    lin = OptimConfig(lr=1e-3, warmup_steps=0, schedule="linear", final_lr_ratio=0.0)
    assert lr_at(49, 100, lin) == pytest.approx(0.5e-3)
    assert lr_at(70, 100, OptimConfig(lr=1e-3, warmup_steps=0, schedule="constant")) == 1e-3


def test_no_weight_decay_on_embeddings() -> None:
    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, mlp_hidden=32, vocab_size=10)
    model = build_model(cfg, torch.device("cpu"), 0)
    opt = build_optimizer(model, OptimConfig(weight_decay=0.1), torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert [p is model.embeddings.weight for p in no_decay["params"]] == [True]
    assert len(decay["params"]) == len(list(model.parameters())) - 1


def test_bundled_assets_are_the_generators_output() -> None:
    """The corpus is made by olmo/data/corpus.py (python -m olmo.data.corpus --write-assets), byte for byte."""
    lines = gzip.decompress(CORPUS_PATH.read_bytes()).decode().splitlines()
    assert [json.loads(ln)["text"] for ln in lines] == list(documents(ASSET_DOCS))
    assert CORPUS_PATH.stat().st_size + TOKENIZER_PATH.stat().st_size < 2 * 1024 * 1024
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    assert tok.get_vocab_size() == 766 and tok.token_to_id("<|endoftext|>") == 0
    assert tok.decode(tok.encode("The clever fox walked to the river.").ids) == "The clever fox walked to the river."
