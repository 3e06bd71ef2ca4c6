"""`olmo` for scripts and OLMo users: override spellings, `--json`, `--smoke --keep`, smoke under torchrun."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo import checkpoint
from olmo.cli.overrides import rewrite

OWN = {"--set", "-s", "--steps", "--device", "--dry-run", "--json"}
Cli = Callable[..., tuple[int, str, str]]


def _recipe(tmp: Path, data: Path) -> Path:
    r = tmp / "r.yaml"
    r.write_text("model: {d_model: 32, n_layers: 2, n_heads: 4, mlp_hidden: 64, vocab_size: 768, max_seq_len: 64}\n"
                 f"data: {{paths: [{data}], seq_len: 32, val_fraction: 0.05}}\nrun_dir: {tmp / 'run'}\n"
                 "device: cpu\nglobal_batch_size: 4\nmicro_batch_size: 4\nsteps: 2\neval_batches: 1\n")
    return r


def test_rewrite_turns_every_spelling_into_set() -> None:
    args = ["r.yaml", "--model.n_layers=4", "--optim.lr", "3e-4", "--data.paths=[a,b]", "--compile.enable",
            "--steps", "5", "--set", "--looks.like=an option", "--run_dir=x", "--sliding.window", "-1",
            "--opt.name=a=b"]
    assert rewrite(args, OWN) == [
        "r.yaml", "--set", "model.n_layers=4", "--set", "optim.lr=3e-4", "--set", "data.paths=[a,b]",
        "--set", "compile.enable=true", "--steps", "5", "--set", "--looks.like=an option", "--set", "run_dir=x",
        "--set", "sliding.window=-1", "--set", "opt.name=a=b"]
    assert rewrite(["--compile.enable", "r.yaml", "--x.y", "recipes/a.py:f"], OWN) == [
        "--set", "compile.enable=true", "r.yaml", "--set", "x.y=true", "recipes/a.py:f"]
    # our own options, unknown undotted options and everything after `--` are left to the parser
    assert rewrite(["--device=cpu", "--bogus=1", "--", "--a.b=c"], OWN) == ["--device=cpu", "--bogus=1", "--",
                                                                            "--a.b=c"]


@pytest.mark.parametrize("spelling", [["--set", "model.n_layer=3"], ["--model.n_layer=3"], ["--model.n_layer", "3"]],
                         ids=["set", "olmo-core", "torchtitan"])
def test_every_spelling_gets_the_same_did_you_mean(spelling: list[str], tiny_data: Path, tmp_path: Path,
                                                   cli: Cli) -> None:
    code, out, err = cli("train", str(_recipe(tmp_path, tiny_data)), *spelling, "--dry-run")
    assert code == 2 and err.strip() == f"olmo: {tmp_path / 'r.yaml'}: unknown key 'model.n_layer'; did you mean " \
                                        "'model.n_layers'?"
    code, out, err = cli("train", str(_recipe(tmp_path, tiny_data)), *[s.replace("n_layer", "n_layers")
                                                                        for s in spelling], "--dry-run")
    assert code == 0 and "n_layers: 3" in out, err


def _one_object(out: str) -> dict:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


def test_json_on_every_data_and_checkpoint_command(tiny_data: Path, tmp_path: Path, cli: Cli) -> None:
    from olmo.data.corpus import CORPUS_PATH

    code, out, err = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "d"), "-t", "bundled", "--json")
    got = _one_object(out)
    assert code == 0 and got["ok"] and got["tokens"] > 0 and got["eos_id"] == 0 and "wrote 1 shard" in err
    code, out, _ = cli("prepare-data", "-i", str(CORPUS_PATH), "-o", str(tmp_path / "d"), "-t", "bundled", "--json",
                       "--dry-run")
    assert code == 0 and _one_object(out)["dry_run"] is True

    code, out, _ = cli("validate-shards", str(tmp_path / "d"), "--json")
    got = _one_object(out)
    assert code == 0 and got["ok"] and got["files"][0]["problems"] == []
    shard = tmp_path / "d" / "part-00000.npy"
    data = bytearray(shard.read_bytes())
    data[-2:] = b"\xff\xff"  # an id far beyond the vocab
    shard.write_bytes(bytes(data))
    code, out, _ = cli("validate-shards", str(tmp_path / "d"), "--json")
    got = _one_object(out)
    assert code == 1 and got["ok"] is False and got["files"][0]["problems"]

    code, out, err = cli("train", str(_recipe(tmp_path, tiny_data)), "--skip-doctor", "--json")
    got = _one_object(out)
    assert code == 0 and got["ok"] and got["step"] == 2 and got["checkpoint"].endswith("step2"), err
    assert "step      2/2" in err  # the log went to stderr

    code, out, err = cli("export-hf", str(tmp_path / "run"), str(tmp_path / "hf"), "--json")
    got = _one_object(out)
    assert code == 0 and got["architecture"] == "Olmo2ForCausalLM" and "config.json" in got["files"], err
    code, out, err = cli("import-hf", str(tmp_path / "hf"), str(tmp_path / "back"), "--json")
    got = _one_object(out)
    assert code == 0 and got["tokenizer"] == str(tmp_path / "back" / "tokenizer.json"), err
    assert Path(got["tokenizer"]).is_file() and Path(got["recipe"]).is_file()


def test_json_failures_are_still_one_object(tmp_path: Path, cli: Cli) -> None:
    code, out, err = cli("validate-shards", str(tmp_path / "nowhere"), "--json")
    assert code == 2 and _one_object(out) == {"ok": False, "error": f"{tmp_path / 'nowhere'} is not a directory",
                                              "exit_code": 2}
    assert err.strip() == f"olmo: {tmp_path / 'nowhere'} is not a directory"
    code, out, err = cli("export-hf", str(tmp_path), str(tmp_path / "hf"), "--json")
    assert code == 2 and _one_object(out)["ok"] is False and "Traceback" not in err


DIVERGES = ["--set", "optim.lr=1e30", "--set", "optim.warmup_steps=0", "--set", "optim.grad_clip=0",
            "--set", "log_interval=1", "--set", "steps=6", "--skip-doctor"]


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_a_run_whose_loss_diverges_fails_through_the_one_error_path(json_flag: list[str], tiny_data: Path,
                                                                    tmp_path: Path, cli: Cli) -> None:
    """A loss that becomes NaN (a learning rate of 1e30) is the run's own failure: exit 1, one line on stderr and,
    with --json, one failure object, from the same entry point that says every other error (never a traceback)."""
    from olmo.errors import OlmoError
    from olmo.train import TrainingFailed

    assert issubclass(TrainingFailed, OlmoError) and TrainingFailed("x").exit_code == 1
    code, out, err = cli("train", str(_recipe(tmp_path, tiny_data)), *DIVERGES, *json_flag)
    last = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err, err
    assert re.fullmatch(r"olmo: the loss became (nan|inf|-inf) at step \d+; lower optim.lr or raise "
                        r"optim.warmup_steps, then resume from the last checkpoint with --resume", last), err
    if json_flag:
        assert _one_object(out) == {"ok": False, "error": last.removeprefix("olmo: "), "exit_code": 1}
    else:
        assert out.strip().splitlines()[-1].startswith("step ") and "{" not in out  # the log, and no object


def test_smoke_keep_keeps_the_run_and_takes_set(tmp_path: Path, cli: Cli) -> None:
    keep = tmp_path / "kept"
    code, out, err = cli("train", "--smoke", "--steps", "4", "--device", "cpu", "--skip-doctor", "--keep", str(keep),
                         "--set", "model.n_layers=1", "--model.d_model=64", "--json")
    got = _one_object(out)
    assert got["kept"] == str(keep) and got["steps"] == 4 and code == (0 if got["ok"] else 1), err
    ckpt = checkpoint.latest(keep / "run")
    assert ckpt is not None and got["checkpoint"] == str(ckpt) and ckpt.name == "step4"
    model = checkpoint.read_state(ckpt)["config"]["model"]
    assert model["n_layers"] == 1 and model["d_model"] == 64  # both override spellings reached the smoke config
    assert (keep / "data" / "manifest.json").is_file()
    code, _, err = cli("train", "--smoke", "--resume")
    assert code == 2 and "--smoke" in err
    code, _, err = cli("train", "recipe.yaml", "--keep", str(keep))
    assert code == 2 and "--keep" in err


@pytest.mark.slow
def test_smoke_runs_under_torchrun(tmp_path: Path) -> None:
    """2 gloo processes: the global batch follows the world size, both ranks share one kept directory."""
    keep = tmp_path / "kept"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "olmo",
           "train", "--smoke", "--steps", "4", "--device", "cpu", "--skip-doctor", "--keep", str(keep),
           "--model.n_layers=1", "--json"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    got = _one_object(proc.stdout)  # rank 0's object only
    assert got["steps"] == 4 and proc.returncode == (0 if got["ok"] else 1), proc.stderr
    ckpt = checkpoint.latest(keep / "run")
    assert ckpt is not None
    state = checkpoint.read_state(ckpt)
    assert state["world_size"] == 2 and state["config"]["global_batch_size"] == 16
