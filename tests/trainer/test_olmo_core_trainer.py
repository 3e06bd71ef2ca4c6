"""Our checkpoints load into OLMo-core's Trainer with its default options: model, optimizer and (where it maps)
trainer state.

OLMo-core's TransformerTrainModule loads the optimizer state flattened (`optim.param_groups.<param>.<key>`,
`optim.state.<param>.<name>`) and asks DCP for every key its own optimizer has, `initial_lr` included: a checkpoint
missing one is refused whole ("Missing key in checkpoint state_dict: optim.param_groups.0.initial_lr", the failure
our checkpoints had before they were saved this way). The fast tests check the keys with torch alone (an optimizer
built as OLMo-core's OptimConfig.build builds it); the slow one runs OLMo-core 3.x itself (the `olmo-core` extra,
which `.ci/run` installs, and where OLMO_REQUIRE_OLMO_CORE=1 turns a missing package into a failure).

Trainer state does not map: OLMo-core's `train/rank<R>.pt` holds its data loader's position, which it checks
against its own dataset's fingerprint, so ours is not written, and its default (load_trainer_state=None: load
it when present) starts the fine-tune at step 0 with our weights and AdamW moments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import require_olmo_core
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

from olmo import checkpoint
from olmo.config import OptimConfig, TrainConfig
from olmo.model import Transformer
from olmo.optim.optimizer import build_optimizer


def _trained(micro: Callable[..., TrainConfig], tiny_data: Path, run: Path) -> tuple[TrainConfig, Path]:
    from olmo.train import train

    cfg = micro(tiny_data, run, steps=2)
    cfg.save_interval = 2
    train(cfg)
    ck = checkpoint.latest(run)
    assert ck is not None
    return cfg, ck


def _saved_keys(ck: Path) -> set[str]:
    return set(checkpoint._read_metadata(ck).state_dict_metadata)


def _requested_keys(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> set[str]:
    """What OLMo-core's TransformerTrainModule asks DCP for (its default state_dict_load_opts)."""
    model(torch.zeros(1, 4, dtype=torch.long)).float().sum().backward()
    optimizer.step()  # AdamW's state exists only after a step
    sd = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict=True))
    return {f"optim.{k}" for k in sd}


def _olmo_core_like_adamw(model: torch.nn.Module, embeddings_first: bool) -> torch.optim.AdamW:
    """torch's AdamW as OLMo-core's OptimConfig.build makes it: `initial_lr` in every group, its override groups
    (OLMo 2's embedding one) before the default group, or one group for everything."""
    emb = [p for n, p in model.named_parameters() if n.startswith("embeddings.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("embeddings.")]
    groups: list[dict[str, Any]] = ([{"params": emb, "weight_decay": 0.0}, {"params": rest}] if embeddings_first
                                    else [{"params": emb + rest}])
    opt = torch.optim.AdamW(groups, lr=4e-4, weight_decay=0.1)
    for g in opt.param_groups:
        g.setdefault("initial_lr", g["lr"])
    return opt


@pytest.mark.parametrize("embeddings_first", [True, False], ids=["olmo2-groups", "one-group"])
def test_our_checkpoint_holds_every_key_olmo_core_asks_for(
    embeddings_first: bool, micro: Callable[..., TrainConfig], tiny_data: Path, tmp_path: Path
) -> None:
    cfg, ck = _trained(micro, tiny_data, tmp_path / "run")
    model = Transformer(cfg.model)
    wanted = _requested_keys(model, _olmo_core_like_adamw(model, embeddings_first))
    assert {k for k in wanted if k.endswith(".initial_lr")}  # the key older checkpoints lacked
    assert not wanted - _saved_keys(ck), sorted(wanted - _saved_keys(ck))[:5]


def test_a_checkpoint_of_an_older_olmo_still_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      micro: Callable[..., TrainConfig], tiny_data: Path) -> None:
    """Older olmo versions saved the optimizer state nested by group index and without `initial_lr`."""
    cfg = micro(tiny_data, tmp_path / "run")
    model = Transformer(cfg.model)
    opt = build_optimizer(model, cfg.optim, torch.device("cpu"))
    model(torch.zeros(1, 4, dtype=torch.long)).float().sum().backward()
    opt.step()
    for g in opt.param_groups:
        del g["initial_lr"]
    nested = checkpoint._state_dicts
    monkeypatch.setattr(checkpoint, "_state_dicts", lambda m, o, flat=True: nested(m, o, flat=False))
    old = checkpoint.save(tmp_path / "run", 1, model, opt, {"config": {"model": {}}})
    monkeypatch.undo()
    assert "optim.param_groups.0.params" in _saved_keys(old)
    assert "optim.param_groups.0.initial_lr" not in _saved_keys(old)

    fresh = Transformer(cfg.model)
    fresh_opt = build_optimizer(fresh, OptimConfig(lr=7e-3), torch.device("cpu"))
    checkpoint.load(old, fresh, fresh_opt)
    for a, b in zip(opt.param_groups, fresh_opt.param_groups, strict=True):
        assert b["weight_decay"] == a["weight_decay"] and b["lr"] == a["lr"]  # the checkpoint's settings
        assert b["initial_lr"] == 7e-3  # a setting the checkpoint lacks stays this run's
    for p, q in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["exp_avg"], fresh_opt.state[q]["exp_avg"])


def _oc_trainer(tmp_path: Path, optim: Any, save: str) -> Any:
    """A real OLMo-core Trainer (TransformerTrainModule, numpy data loader) for OLMo-core's own 1M OLMo 2 model,
    the shapes of `_oc_recipe`."""
    import numpy as np
    from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
    from olmo_core.nn.transformer import TransformerConfig
    from olmo_core.train import TrainerConfig
    from olmo_core.train.train_module import TransformerTrainModuleConfig

    tokens = tmp_path / "oc-tokens.npy"
    np.random.default_rng(0).integers(0, 700, size=4096, dtype=np.uint16).tofile(tokens)
    model = TransformerConfig.olmo2_1M(vocab_size=768).build(init_device="cpu")
    module = TransformerTrainModuleConfig(rank_microbatch_size=64, max_sequence_length=32, optim=optim).build(
        model, device=torch.device("cpu"))
    tokenizer = TokenizerConfig(vocab_size=768, eos_token_id=0, pad_token_id=1)
    work = str(tmp_path / "oc-work")
    dataset = NumpyFSLDatasetConfig(paths=[str(tokens)], sequence_length=32, tokenizer=tokenizer,
                                    work_dir=work).build()
    loader = NumpyDataLoaderConfig(global_batch_size=64, seed=0).build(dataset)
    return TrainerConfig(save_folder=save, work_dir=work, device="cpu").build(module, loader)


def _oc_recipe(tmp_path: Path, tiny_data: Path) -> Path:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model: {d_model: 12, n_layers: 4, n_heads: 4, head_dim: 4, mlp_hidden: 256, vocab_size: 768, "
        "max_seq_len: 64, attn_backend: sdpa}\n"
        f"data: {{paths: [{tiny_data}], seq_len: 32, val_fraction: 0.05}}\n"
        f"run_dir: {tmp_path / 'run'}\nsteps: 3\nglobal_batch_size: 4\nmicro_batch_size: 4\ndevice: cpu\n"
        "save_interval: 3\neval_batches: 1\noptim: {lr: 1.0e-3, warmup_steps: 1, weight_decay: 0.1}\n")
    return recipe


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["adamw-olmo2-groups", "skip-step-adamw", "adamw-one-group"])
@pytest.mark.parametrize("load", [{}, {"load_trainer_state": False}], ids=["defaults", "no-trainer-state"])
def test_olmo_core_trainer_loads_our_checkpoint(kind: str, load: dict[str, bool], tmp_path: Path, tiny_data: Path,
                                                cli: Callable[..., tuple[int, str, str]]) -> None:
    require_olmo_core()
    from olmo_core.optim import AdamWConfig, OptimGroupOverride, SkipStepAdamWConfig
    from olmo_core.train.common import Duration

    code, _, err = cli("train", str(_oc_recipe(tmp_path, tiny_data)), "--skip-doctor")
    assert code == 0, err
    ours = checkpoint.latest(tmp_path / "run")
    assert ours is not None
    no_decay = [OptimGroupOverride(params=["embeddings.weight"], opts={"weight_decay": 0.0})]
    optim = {"adamw-olmo2-groups": AdamWConfig(lr=4e-4, weight_decay=0.1, group_overrides=no_decay),
             "skip-step-adamw": SkipStepAdamWConfig(lr=4e-4, weight_decay=0.1, group_overrides=no_decay),
             "adamw-one-group": AdamWConfig(lr=4e-4, weight_decay=0.1)}[kind]
    trainer = _oc_trainer(tmp_path, optim, str(tmp_path / "oc-save"))
    trainer.load_checkpoint(str(tmp_path / "run" / checkpoint.CHECKPOINTS), **load)  # its save-folder lookup

    module = trainer.train_module
    assert trainer.global_step == 0  # no trainer state of ours: a fine-tune from step 0
    weights = checkpoint.load_model_state(ours)
    for name, p in module.model.named_parameters():
        assert torch.equal(p.detach(), weights[name]), name
    saved = checkpoint._read_metadata(ours)
    moments = {f"optim.state.{n}.exp_avg": torch.empty_like(p) for n, p in module.model.named_parameters()}
    # through olmo's one safe loader (it never unpickles), as every read of a checkpoint goes
    checkpoint._dcp_load({"optim": {k.removeprefix("optim."): v for k, v in moments.items()}}, ours)
    assert set(moments) <= set(saved.state_dict_metadata)
    for name, p in module.model.named_parameters():
        assert torch.equal(module.optim.state[p]["exp_avg"], moments[f"optim.state.{name}.exp_avg"]), name
    groups = module.optim.param_groups
    assert all(g["initial_lr"] == 4e-4 for g in groups)  # OLMo-core's own peak LR (its fixed field) stays
    if kind != "adamw-one-group":  # OLMo 2's groups: the embedding's weight decay is 0, the others' ours
        assert [g["weight_decay"] for g in groups] == [0.0, 0.1]

    trainer.max_duration = Duration.steps(2)  # and it trains on from there, saving its own checkpoint
    trainer.fit()
    assert trainer.global_step == 2 and (tmp_path / "oc-save" / "step2").is_dir()


@pytest.mark.slow
def test_olmo_core_trainer_refuses_trainer_state_we_do_not_write(tmp_path: Path, tiny_data: Path,
                                                                 cli: Callable[..., tuple[int, str, str]]) -> None:
    require_olmo_core()
    from olmo_core.optim import AdamWConfig

    code, _, err = cli("train", str(_oc_recipe(tmp_path, tiny_data)), "--skip-doctor")
    assert code == 0, err
    ours = checkpoint.latest(tmp_path / "run")
    trainer = _oc_trainer(tmp_path, AdamWConfig(lr=4e-4), str(tmp_path / "oc-save"))
    with pytest.raises(FileNotFoundError, match="Missing trainer state"):
        trainer.load_checkpoint(str(ours), load_trainer_state=True)
