"""Printed commands and `--set` hints are pasteable: bash splits each into exactly the arguments meant, and the
real parsers (the override rewriter, the recipe's YAML) read the values back unchanged. Each hint is taken from
the command's real output, run through `bash -c` word splitting, and then used.

The family: `--init-from`'s "holds a different model; add --set ..." (a list printed with spaces, `[16, 16, 16,
-1]`, split into four words), import-hf's fine-tune commands (paths with spaces or brackets), the shard-damage
hint `olmo validate-shards DIR`, and the README's `--set data.paths=[...]` examples (quoted: a bracket is a glob).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from olmo.cli.overrides import rewrite
from olmo.hints import command, set_arg
from olmo.recipe import apply_override

CLI = Callable[..., tuple[int, str, str]]
README = Path(__file__).parents[2] / "README.md"


def bash_words(text: str) -> list[str]:
    """`text` split into words exactly as bash does when it is pasted after a command (quotes, globs, $)."""
    out = subprocess.run(["bash", "-c", f"printf '%s\\0' {text}"], capture_output=True, check=True,
                         cwd=Path(__file__).parent)  # a folder with files, so a bracket glob could match
    return out.stdout.decode().split("\0")[:-1]


def parsed_sets(words: list[str]) -> dict[str, Any]:
    """What `olmo train` does with those words: its override rewriter, then --set's YAML parser."""
    raw: dict[str, Any] = {}
    args = rewrite(words, set())
    for flag, item in zip(args[::2], args[1::2], strict=True):
        assert flag == "--set", args
        apply_override(raw, item)
    return raw


VALUES: list[Any] = [[16, 16, 16, -1], 1e-6, 5e-324, 1.5, 500000.0, float("inf"), -3, True, False, None, "fp32",
                     "a b", "yes", "null", "1e-6", "it's", "$HOME", "*", "[x]", "{a: 1}", "a,b", "", "-1",
                     [None, "x y", 2.5], {"k": [1, 2]}]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v)[:20] for v in VALUES])
def test_set_arg_survives_bash_and_parses_back(value: Any) -> None:
    words = bash_words(set_arg("model.x", value))
    assert words[0] == "--set" and len(words) == 2, words
    assert parsed_sets(words) == {"model": {"x": value}}


def test_init_from_hint_pastes_into_a_working_command(tmp_path: Path, tiny_data: Path, cli: CLI) -> None:
    """The issue's case: a sliding-window checkpoint and a recipe without windows."""
    def recipe(name: str, extra: str) -> Path:
        r = tmp_path / name
        r.write_text("model: {d_model: 32, n_layers: 4, n_heads: 4, mlp_hidden: 64, vocab_size: 768, max_seq_len: 64"
                     f"{extra}}}\ndata: {{paths: [{tiny_data}], seq_len: 32}}\nrun_dir: {tmp_path / name}-run\n"
                     "device: cpu\nglobal_batch_size: 4\nmicro_batch_size: 4\nsteps: 1\nsave_interval: 1\n")
        return r

    code, _, err = cli("train", str(recipe("src.yaml", ", sliding_window: [16, 16, 16, -1], norm_eps: 1.0e-5")),
                       "--skip-doctor")
    assert code == 0, err
    plain = recipe("ft.yaml", "")
    code, _, err = cli("train", str(plain), "--init-from", str(tmp_path / "src.yaml-run"), "--skip-doctor")
    assert code == 2, err
    hint = re.search(r"add (.*) to the command", err)
    assert hint, err
    words = bash_words(hint.group(1))
    assert parsed_sets(words)["model"] == {"sliding_window": [16, 16, 16, -1], "norm_eps": 1e-5}
    code, out, err = cli("train", str(plain), "--init-from", str(tmp_path / "src.yaml-run"), "--skip-doctor", *words)
    assert code == 0 and "initialised the weights" in out, err


def test_import_hf_commands_paste_with_any_folder_name(tmp_path: Path, tiny_data: Path, micro: Any,
                                                        cli: CLI) -> None:
    from olmo.train import train

    cfg = micro(tiny_data, tmp_path / "run", steps=1)
    cfg.save_interval = 1
    train(cfg)
    code, _, err = cli("export-hf", str(tmp_path / "run"), str(tmp_path / "hf"))
    assert code == 0, err
    out_dir = tmp_path / "my models [v2] $x"
    code, out, err = cli("import-hf", str(tmp_path / "hf"), str(out_dir))
    assert code == 0, err
    lines = out.splitlines()
    train_line = next(ln.strip() for ln in lines if ln.strip().startswith("olmo train"))
    prep_line = next(ln.strip() for ln in lines if ln.strip().startswith("olmo prepare-data"))
    assert bash_words(train_line) == ["olmo", "train", str(out_dir / "recipe.yaml"), "--set", "data.paths=[data/ft]"]
    assert bash_words(prep_line)[-1] == str(out_dir / "tokenizer.json")
    assert parsed_sets(bash_words(train_line)[3:]) == {"data": {"paths": ["data/ft"]}}
    recipe = (out_dir / "recipe.yaml").read_text()
    assert f"#   {train_line}\n" in recipe  # the recipe's own comment holds the same command


def test_a_line_break_in_a_folder_name_cannot_reach_the_recipe_yaml(tmp_path: Path, tiny_data: Path, micro: Any,
                                                                    cli: CLI) -> None:
    import yaml

    from olmo.train import train

    cfg = micro(tiny_data, tmp_path / "run", steps=1)
    cfg.save_interval = 1
    train(cfg)
    hf = tmp_path / "evil\nrun_dir: /tmp/owned\nx"
    code, _, err = cli("export-hf", str(tmp_path / "run"), str(hf))
    assert code == 0, err
    code, _, err = cli("import-hf", str(hf), str(tmp_path / "imp"))
    assert code == 0, err
    recipe = yaml.safe_load((tmp_path / "imp" / "recipe.yaml").read_text())
    assert recipe["run_dir"] != "/tmp/owned"


def test_validate_shards_hint_names_the_folder_as_one_word(tmp_path: Path, tiny_data: Path, micro: Any,
                                                           cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo.data import shard_check

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shard_check._memo.clear()
    data = tmp_path / "my data $HOME"  # (brackets would make data.paths a glob pattern)
    shutil.copytree(tiny_data, data)
    with open(data / "part-00000.npy", "r+b") as f:  # one byte changes: the recorded sha256 no longer matches
        f.seek(1000)
        f.write(b"\x01")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {d_model: 32, n_layers: 1, n_heads: 4, mlp_hidden: 64, vocab_size: 768, "
                      f"max_seq_len: 64}}\ndata: {{paths: [{str(data)!r}], seq_len: 32}}\nrun_dir: {tmp_path / 'run'}\n"
                      "device: cpu\nglobal_batch_size: 4\nmicro_batch_size: 4\nsteps: 1\n")
    code, _, err = cli("train", str(recipe), "--skip-doctor")
    hint = re.search(r"`(olmo validate-shards .*)` locates the damage", err)
    assert code == 2 and hint, err
    words = bash_words(hint.group(1))
    assert words == ["olmo", "validate-shards", str(data)]
    code, _, _ = cli(*words[1:])
    assert code == 1  # the damage it promises to locate


def test_command_quotes_only_what_needs_it() -> None:
    assert command("olmo", "validate-shards", Path("/data/tokens")) == "olmo validate-shards /data/tokens"
    assert bash_words(command("a", "b c", "'", "$(touch x)")) == ["a", "b c", "'", "$(touch x)"]


def test_readme_set_examples_with_brackets_are_quoted() -> None:
    unquoted = re.findall(r"--set [A-Za-z_.]+=\[", README.read_text())
    assert not unquoted, unquoted
