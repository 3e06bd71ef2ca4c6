"""Values a recipe or `--set` can hold that used to slip past the type and range checks, each found by a red-team
pass over `olmo train` / `prepare-data` with hand-written bad values (none comes from a thread):

- a whole number past what torch takes (`--set seed=99999999999999999999999`): an overflow traceback from
  torch.manual_seed and "this is a bug in olmo"; and one just past 2**53 read through a float, so the range check
  saw 2**53 and let it by;
- an empty path (`--set run_dir=`, an unset shell variable): the run wrote config.yaml, metrics.jsonl and
  checkpoints/ into the working folder beside the user's files;
- YAML's null for a text field (`--set "run_dir=   "`): the run wrote into a folder named "None";
- `prepare-data --workers 100000`: a thread pool of that size hung the machine.

Each must be one line on stderr, exit 2, and nothing written where the command runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.config import TrainConfig
from olmo.config_numbers import MAX_COUNT, check_numbers
from olmo.data.prepare_pipeline import usable_cpus
from olmo.errors import ConfigError
from olmo.recipe import load_recipe

CLI = Callable[..., tuple[int, str, str]]
RECIPE = str(Path(__file__).resolve().parents[2] / "recipes" / "olmo2_60m.yaml")


def _one_line_refusal(cli: CLI, where: Path, *args: str) -> str:
    before = sorted(p.name for p in where.iterdir())
    code, out, err = cli(*args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert sorted(p.name for p in where.iterdir()) == before, "a refused command wrote into the working folder"
    return lines[0]


@pytest.mark.parametrize("value", ["99999999999999999999999", "-99999999999999999999999", str(2**64),
                                   str(MAX_COUNT + 1)])
@pytest.mark.parametrize("field", ["seed", "data.seed", "eval_interval", "keep_last_n"])
def test_a_whole_number_too_large_is_refused_by_name(field: str, value: str) -> None:
    cfg = load_recipe(RECIPE, [f"{field}={value}"])
    with pytest.raises(ConfigError, match=rf"^{field} ") as e:
        check_numbers(cfg)
    assert len(str(e.value)) < 200  # never the number's 10,000 digits
    assert load_recipe(RECIPE, [f"{field}={MAX_COUNT}"]) is not None  # the bound itself is allowed, read exactly


def test_a_whole_number_is_read_exactly_not_through_a_float() -> None:
    assert load_recipe(RECIPE, [f"seed={2**53 + 1}"]).seed == 2**53 + 1
    assert load_recipe(RECIPE, ["seed=1e6", "data.seed=1_000"]).seed == 1_000_000


def test_every_whole_number_field_is_bounded_even_one_added_later() -> None:
    """The check walks the config's fields, so a field whose range names no upper bound is bounded too."""
    cfg = TrainConfig()
    cfg.optim.warmup_steps = MAX_COUNT * 4
    with pytest.raises(ConfigError, match=r"optim\.warmup_steps"):
        check_numbers(cfg)


def test_the_smoke_run_refuses_a_seed_torch_cannot_take(cli: CLI, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = _one_line_refusal(cli, tmp_path, "train", "--smoke", "--steps", "4", "--set",
                             "seed=99999999999999999999999")
    assert "seed" in line and "more than olmo counts to" in line


@pytest.mark.parametrize("setting", ["run_dir=", "run_dir=''", "init_from=", 'data.paths=[""]',
                                     "data.val_paths=[' ']", "run_dir=   ", "run_dir=null"])
def test_an_empty_or_null_path_is_never_the_working_folder(cli: CLI, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the user's own file\n")
    line = _one_line_refusal(cli, tmp_path, "train", "--smoke", "--steps", "4", "--set", setting)
    name = setting.split("=", 1)[0]
    assert name in line and ("is empty" in line or "must be str" in line), line
    assert (tmp_path / "notes.txt").read_text() == "the user's own file\n"


def test_more_workers_than_the_machine_can_use_is_refused_before_any_start(cli: CLI, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs.jsonl").write_text('{"text": "hello"}\n')
    too_many = 4 * usable_cpus() + 1
    line = _one_line_refusal(cli, tmp_path, "prepare-data", "-i", "docs.jsonl", "-o", "out", "-t", "bundled",
                             "--workers", str(too_many))
    assert f"--workers {too_many:,}" in line and f"at most {4 * usable_cpus()}" in line
    assert "RAYON_NUM_THREADS" not in os.environ or os.environ["RAYON_NUM_THREADS"] != str(too_many)


# YAML keys that are not names (a second red-team pass): `2: 3` is an int key, `true:` a bool, `null:` None; each
# went to difflib and ended in "TypeError: 'int' object is not iterable" and "this is a bug in olmo"
@pytest.mark.parametrize("text", ["2: 3\n", "model: {1: 2}\n", "null: 3\n", "true: 3\n", "optim: {2.5: 1}\n",
                                  "model: {null: 2}\n"])
def test_a_recipe_key_that_is_not_a_name_is_one_line(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     text: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k.yaml").write_text(text)
    line = _one_line_refusal(cli, tmp_path, "train", "k.yaml", "--dry-run", "--skip-doctor")
    assert "not a name" in line and "known keys" in line


def test_a_set_mapping_with_a_number_key_is_one_line(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = _one_line_refusal(cli, tmp_path, "train", RECIPE, "--set", "model={1: 2}", "--dry-run", "--skip-doctor")
    assert "model.1" in line and "not a name" in line


# the launcher's variables, set by hand or left over from another job: each was a traceback (int('abc'), a division
# by WORLD_SIZE=0, a bare assert for RANK=-1, torch's "MASTER_ADDR expected" as "a bug in olmo")
@pytest.mark.parametrize(("env", "words"), [
    ({"RANK": "abc"}, "RANK='abc' is not a whole number"), ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0"), ({"RANK": "-1"}, "RANK=-1 is out of range"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "not below WORLD_SIZE=2"),
    ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR or MASTER_PORT is not set"),
])
def test_launcher_variables_no_launcher_sets_are_one_line(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          env: dict[str, str], words: str) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    line = _one_line_refusal(cli, tmp_path, "train", "--smoke", "--device", "cpu", "--steps", "4")
    assert words in line and "torchrun" in line, line


@pytest.mark.parametrize("device", ["5", "gpu", "cuda:x", "mps", "cuda:0:1"])
def test_a_device_olmo_cannot_train_on_is_refused_by_the_dry_run_too(cli: CLI, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      device: str) -> None:
    """`--dry-run` refuses what the run would refuse (it let `device: 5` through; a red-team pass)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.yaml").write_text(f"device: '{device}'\nsteps: 4\n")
    line = _one_line_refusal(cli, tmp_path, "train", "d.yaml", "--dry-run", "--skip-doctor")
    assert ("not a torch device" in line or "not one olmo trains on" in line) and "cuda:N" in line
