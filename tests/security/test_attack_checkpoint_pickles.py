"""Attacks through checkpoints: a pickle payload placed where torch's stock DCP loader would unpickle it
(`torch.load(weights_only=False)` for every non-tensor item, the plain unpickler for `.metadata`). Each command
that reads a checkpoint (`olmo train --resume`, `--init-from`, `export-hf`, an OLMo-core save folder) must refuse
it in one line with exit 2, and the payload's marker file must not exist afterwards.

The payload is a real `__reduce__` calling `exec` (tests/security/_crafted.py), put in: an optimizer value (a
bytes item), a weight re-declared as a bytes item, a tensor item's own archive, a raw (non-zip) pickle, a file
outside the checkpoint that the index points at. Source of the attack class: torch's FileSystemReader /
DefaultLoadPlanner.load_bytes (torch 2.6-2.13), the red-team report that opened this work.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from _crafted import Payload, Victim, payload_archive, point_item_at, put, resave, splice

from olmo.data.corpus import TOKENIZER_PATH

Cli = Callable[..., tuple[int, str]]
STEP = "checkpoints/step2"


def refused(code: int, err: str, marker: Path) -> None:
    """The attack did not work: nothing ran, and the command said why in one line with exit 2."""
    assert not marker.exists(), "the checkpoint's payload ran"
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("olmo: ") and "Traceback" not in err, err


def resume(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> tuple[int, str]:
    recipe = victim.recipe(tmp_path, tmp_path / "run")
    return olmo_cli("train", str(recipe), "--resume", "--skip-doctor")


W_Q = "blocks.0.attention.w_q.weight"  # optimizer entries are keyed by parameter name, as OLMo-core keys them


@pytest.mark.parametrize("key", [f"optim.param_groups.{W_Q}.lr", "optim.param_groups.embeddings.weight.betas",
                                 f"optim.param_groups.{W_Q}.initial_lr"])
def test_resume_refuses_a_pickle_in_an_optimizer_value(key: str, victim: Victim, tmp_path: Path,
                                                       olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    run = victim.copy(tmp_path / "run")
    resave(run / STEP, lambda sd: put(sd, key, Payload(marker)))
    code, err = resume(victim, tmp_path, olmo_cli)
    refused(code, err, marker)
    assert key in err and "refusing" in err
    assert not (run / "checkpoints" / "step4").exists()  # it did not go on to train


def test_resume_refuses_a_weight_stored_as_a_pickle(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    run = victim.copy(tmp_path / "run")
    resave(run / STEP, lambda sd: put(sd, "model.embeddings.weight", Payload(marker)))
    code, err = resume(victim, tmp_path, olmo_cli)
    refused(code, err, marker)


def test_resume_refuses_a_tensor_item_whose_archive_is_a_payload(victim: Victim, tmp_path: Path,
                                                                 olmo_cli: Cli) -> None:
    """The index still says "tensor"; the item's own torch.save archive carries the payload."""
    marker = tmp_path / "marker"
    run = victim.copy(tmp_path / "run")
    splice(run / STEP, "optim.state.blocks.0.attention.w_q.weight.exp_avg", payload_archive(marker))
    code, err = resume(victim, tmp_path, olmo_cli)
    refused(code, err, marker)
    assert "builtins.exec" in err


def test_resume_refuses_a_raw_pickle_in_a_bytes_item(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    """torch.load also reads the legacy (non-zip) format: a bare pickle is refused before anything reads it."""
    marker = tmp_path / "marker"
    run = victim.copy(tmp_path / "run")
    splice(run / STEP, "optim.param_groups.blocks.0.attention.w_q.weight.eps", pickle.dumps(Payload(marker)))
    code, err = resume(victim, tmp_path, olmo_cli)
    refused(code, err, marker)


def test_resume_refuses_an_index_pointing_outside_the_checkpoint(victim: Victim, tmp_path: Path,
                                                                 olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(payload_archive(marker))
    run = victim.copy(tmp_path / "run")
    for target in (str(outside), "../../../elsewhere.bin"):
        point_item_at(run / STEP, "optim.param_groups.blocks.0.attention.w_q.weight.lr", target, outside.stat().st_size)
        code, err = resume(victim, tmp_path, olmo_cli)
        refused(code, err, marker)
        assert "not a file of the checkpoint folder" in err


def test_init_from_refuses_a_weight_stored_as_a_pickle(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    src = victim.copy(tmp_path / "src")
    resave(src / STEP, lambda sd: put(sd, "model.blocks.1.feed_forward.w2.weight", Payload(marker)))
    recipe = victim.recipe(tmp_path, tmp_path / "fresh")
    code, err = olmo_cli("train", str(recipe), "--init-from", str(src / STEP), "--skip-doctor")
    refused(code, err, marker)
    assert not (tmp_path / "fresh" / "checkpoints").exists()


def test_init_from_refuses_a_tensor_archive_payload(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    src = victim.copy(tmp_path / "src")
    splice(src / STEP, "model.lm_head.w_out.weight", payload_archive(marker))
    recipe = victim.recipe(tmp_path, tmp_path / "fresh")
    code, err = olmo_cli("train", str(recipe), "--init-from", str(src / STEP), "--skip-doctor")
    refused(code, err, marker)


@pytest.mark.parametrize("how", ["bytes-item", "tensor-archive"])
def test_export_hf_refuses_a_payload(how: str, victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    src = victim.copy(tmp_path / "src")
    if how == "bytes-item":
        resave(src / STEP, lambda sd: put(sd, "model.embeddings.weight", Payload(marker)))
    else:
        splice(src / STEP, "model.embeddings.weight", payload_archive(marker))
    code, err = olmo_cli("export-hf", str(src / STEP), str(tmp_path / "hf"))
    refused(code, err, marker)
    assert not (tmp_path / "hf").exists()


def _olmo_core_layout(victim: Victim, tmp_path: Path) -> Path:
    """The victim's weights in OLMo-core's save-folder layout, with the config.json its trainer writes."""
    src = victim.copy(tmp_path / "src") / STEP
    ck = tmp_path / "core-save" / "step2"
    (ck / "model_and_optim").mkdir(parents=True)
    for p in src.iterdir():
        if p.name in (".metadata",) or p.suffix == ".distcp":
            p.rename(ck / "model_and_optim" / p.name)
    model = {"d_model": 64, "n_layers": 2, "vocab_size": 768,
             "block": {"name": "reordered_norm", "layer_norm": {"name": "rms", "eps": 1e-6},
                       "sequence_mixer": {"n_heads": 4, "rope": {"theta": 500000}, "qk_norm": {"name": "rms"}},
                       "feed_forward": {"hidden_size": 128}}}
    (ck / "config.json").write_text(json.dumps({"model": model}))
    return ck


@pytest.mark.parametrize("how", ["bytes-item", "tensor-archive"])
def test_olmo_core_checkpoint_with_a_payload_is_refused(how: str, victim: Victim, tmp_path: Path,
                                                        olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    ck = _olmo_core_layout(victim, tmp_path)
    if how == "bytes-item":
        resave(ck, lambda sd: put(sd, "model.blocks.0.attention.w_k.weight", Payload(marker)),
               dcp_dir=ck / "model_and_optim")
    else:
        splice(ck, "model.blocks.0.attention.w_k.weight", payload_archive(marker), dcp_dir=ck / "model_and_optim")
    code, err = olmo_cli("export-hf", str(ck.parent), str(tmp_path / "hf"), "--tokenizer", str(TOKENIZER_PATH))
    refused(code, err, marker)


def test_import_hf_never_unpickles_bin_weights(tmp_path: Path, olmo_cli: Cli) -> None:
    """A Hugging Face folder with only pytorch_model.bin (a pickle): import-hf reads safetensors alone."""
    import torch

    marker = tmp_path / "marker"
    hf = tmp_path / "hf"
    hf.mkdir()
    torch.save({"model.embed_tokens.weight": Payload(marker)}, hf / "pytorch_model.bin")
    (hf / "config.json").write_text(json.dumps({
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 768, "max_position_embeddings": 128}))
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    refused(code, err, marker)
    assert not (tmp_path / "out").exists()


def test_an_untouched_copy_still_resumes_init_froms_and_exports(victim: Victim, tmp_path: Path,
                                                                 olmo_cli: Cli) -> None:
    """The control: the same commands on the victim's checkpoint as written succeed, so the refusals above
    are about the payloads."""
    run = victim.copy(tmp_path / "run")
    code, err = resume(victim, tmp_path, olmo_cli)
    assert code == 0, err
    assert (run / "checkpoints" / "step4").is_dir()
    code, err = olmo_cli("export-hf", str(run / "checkpoints" / "step4"), str(tmp_path / "hf"))
    assert code == 0, err
    recipe = victim.recipe(tmp_path, tmp_path / "fresh")
    code, err = olmo_cli("train", str(recipe), "--init-from", str(run / "checkpoints" / "step4"), "--skip-doctor")
    assert code == 0, err
    ck = _olmo_core_layout(victim, tmp_path)
    code, err = olmo_cli("export-hf", str(ck.parent), str(tmp_path / "hf-core"), "--tokenizer", str(TOKENIZER_PATH))
    assert code == 0, err


def test_export_refuses_weights_the_index_calls_integers(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    """Shapes match, so the dtype is what is checked before anything is allocated or read."""
    import torch

    src = victim.copy(tmp_path / "src")
    resave(src / STEP, lambda sd: put(sd, "model.embeddings.weight", torch.zeros(768, 64, dtype=torch.int64)))
    code, err = olmo_cli("export-hf", str(src / STEP), str(tmp_path / "hf"))
    refused(code, err, tmp_path / "marker")
    assert "floating-point" in err and not (tmp_path / "hf").exists()


def test_resume_refuses_a_weight_of_another_dtype_family(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    import torch

    run = victim.copy(tmp_path / "run")
    resave(run / STEP, lambda sd: put(sd, "model.lm_head.w_out.weight", torch.zeros(768, 64, dtype=torch.int32)))
    code, err = resume(victim, tmp_path, olmo_cli)
    refused(code, err, tmp_path / "marker")
    assert "torch.int32" in err
