"""Attacks on `olmo`'s readers: YAML alias bombs (a recipe or `--set`), a 300 MB recipe, files of gigabytes where a
few bytes belong (checkpoints/latest, tokenizer.path, metrics.jsonl), FIFOs, a 400,000-shard manifest. Each must be
refused (or, for a pointer or a metrics log, read within its budget) without hanging and without its size in
memory; an alias bomb must be refused before a single value of it is built.

Before the bounded reader and loader: a 1 KB bomb took 6.2 GB and 38-60 s, a 300 MB recipe 75 s, the 3 GB files
3-6 GB, the 400,000-shard manifest 1 GB before its refusal. Measured in one child process (a hang fails the test
at the child's timeout); after each attack it records how far its peak RSS rose.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
import yaml
from _bounds_measure import child_python

from olmo.config import ConfigError
from olmo.recipe import load_recipe

GIB = 1 << 30
MB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def alias_bomb(levels: int = 9, flow: bool = False) -> str:
    """A YAML value of 9 ** levels leaves in well under 1 KB (each level repeats the previous one 9 times)."""
    names = [chr(ord("a") + i) for i in range(levels)]
    items = ["&a [x, x, x, x, x, x, x, x, x]"]
    items += [f"&{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in itertools.pairwise(names)]
    if flow:
        return "[" + ", ".join(items) + "]"
    return "".join(f"{n}: {item}\n" for n, item in zip(names, items, strict=True))


_CHILD = r"""
    import json, resource, sys
    from pathlib import Path

    from olmo.checkpoint import _parse_state, latest
    from olmo.data.prepare import load_tokenizer
    from olmo.data.shards import load_manifest, read_sidecars
    from olmo.recipe import load_recipe
    from olmo.train import _trim_metrics

    t = Path(sys.argv[1])
    shipped = sys.argv[2]
    ATTACKS = {
        "recipe alias bomb": lambda: load_recipe(str(t / "bomb.yaml")),
        "--set alias bomb": lambda: load_recipe(shipped, ["run_dir=" + (t / "flow.txt").read_text()]),
        "recipe 300 MB": lambda: load_recipe(str(t / "huge.yaml")),
        "recipe /dev/zero": lambda: load_recipe("/dev/zero"),
        "recipe fifo": lambda: load_recipe(str(t / "fifo.yaml")),
        "recipe 100K-character value": lambda: load_recipe(str(t / "long.yaml")),
        "checkpoint pointer 3 GiB": lambda: latest(t / "run-big"),
        "checkpoint pointer fifo": lambda: latest(t / "run-fifo"),
        "train state fifo": lambda: _parse_state(t / "ck"),
        "tokenizer 3 GiB": lambda: load_tokenizer(t / "tok" / "tokenizer.json"),
        "manifest of 400,000 shards": lambda: load_manifest(t / "many"),
        "manifest fifo": lambda: load_manifest(t / "mfifo"),
        "shard sidecar fifo": lambda: read_sidecars(t / "mfifo"),
        "metrics.jsonl with a 1 GiB line": lambda: _trim_metrics(t / "metrics.jsonl", 10),
    }
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {}
    for name, attack in ATTACKS.items():
        try:
            result = {"returned": repr(attack())[:300]}
        except Exception as e:  # noqa: BLE001 - every refusal is recorded by type and message
            result = {"error": type(e).__name__, "message": str(e)[:500]}
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["rss_rise_mb"] = (peak - base) / 1024
        base = max(base, peak)
        out[name] = result
    print(json.dumps(out))
"""


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)
    return path


@pytest.fixture(scope="module")
def attacks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, object]]]:
    t = tmp_path_factory.mktemp("trainer-attacks")
    (t / "bomb.yaml").write_text("model: olmo2_60m\n" + alias_bomb())
    (t / "flow.txt").write_text(alias_bomb(flow=True))
    _sparse(t / "huge.yaml", 300 * MB, b"model: olmo2_60m\nrun_dir: ")
    os.mkfifo(t / "fifo.yaml")
    (t / "long.yaml").write_text("model: olmo2_60m\nrun_dir: " + "x" * 100_000 + "\n")
    _sparse(t / "run-big" / "checkpoints" / "latest", 3 * GIB, b"step10")
    (t / "run-fifo" / "checkpoints").mkdir(parents=True)
    os.mkfifo(t / "run-fifo" / "checkpoints" / "latest")
    (t / "ck").mkdir()
    os.mkfifo(t / "ck" / "train_state.json")
    _sparse(t / "tok" / "tokenizer.json", 3 * GIB, b'{"version": "1.0", ')
    shards = ",".join(f'{{"file": "part-{i:06d}.npy"}}' for i in range(400_000))
    (t / "many").mkdir()
    (t / "many" / "manifest.json").write_text(f'{{"format": "olmo-token-shards", "shards": [{shards}]}}')
    (t / "mfifo").mkdir()
    os.mkfifo(t / "mfifo" / "manifest.json")
    os.mkfifo(t / "mfifo" / "part-00000.json")
    _sparse(t / "metrics.jsonl", GIB, b'{"step": 1, "loss": 2.5}\n{"step": 2')  # a record, then a torn 1 GiB one
    got = child_python(_CHILD, str(t), str(ROOT / "recipes" / "olmo2_60m.yaml"))
    assert got["result"] is not None, got["err"]
    return t, dict(got["result"])


EXPECTED = {
    "recipe alias bomb": ("ConfigError", "alias bomb"),
    "--set alias bomb": ("ConfigError", "alias bomb"),
    "recipe 300 MB": ("ConfigError", "300 MiB, larger than 1 MiB, the most a recipe can be"),
    "recipe /dev/zero": ("ConfigError", "character device, not a regular file"),
    "recipe fifo": ("ConfigError", "FIFO (named pipe), not a regular file"),
    "recipe 100K-character value": ("ConfigError", "holds a value of 100,000 characters"),
    "train state fifo": (None, "FIFO (named pipe), not a regular file"),
    "tokenizer 3 GiB": ("ConfigError", "3 GiB, larger than 64 MiB, the most a tokenizer can be"),
    "manifest of 400,000 shards": ("ManifestError", "lists 400,000 shards, more than the 50,000"),
    "manifest fifo": ("ManifestError", "FIFO (named pipe), not a regular file"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_attack_is_refused_in_one_line(attacks: tuple[Path, dict[str, dict[str, object]]], name: str) -> None:
    got = attacks[1][name]
    kind, words = EXPECTED[name]
    text = str(got.get("message") if kind else got.get("returned"))
    assert got.get("error") == kind, got
    assert words in text and "\n" not in text and len(text) < 400, text


def test_pointers_and_sidecars_that_are_not_files_are_ignored(
        attacks: tuple[Path, dict[str, dict[str, object]]]) -> None:
    got = attacks[1]
    assert got["checkpoint pointer 3 GiB"]["returned"] == "None"  # no complete checkpoint: nothing to resume
    assert got["checkpoint pointer fifo"]["returned"] == "None"
    assert got["shard sidecar fifo"]["returned"] == "[]"


def test_a_metrics_log_with_a_gigabyte_line_is_trimmed_by_streaming(
        attacks: tuple[Path, dict[str, dict[str, object]]]) -> None:
    folder, got = attacks
    assert got["metrics.jsonl with a 1 GiB line"]["returned"] == "None"
    assert (folder / "metrics.jsonl").read_bytes() == b'{"step": 1, "loss": 2.5}\n'  # the torn record dropped


def test_no_attack_costs_its_size_in_memory(attacks: tuple[Path, dict[str, dict[str, object]]]) -> None:
    rises = {name: float(r["rss_rise_mb"]) for name, r in attacks[1].items()}  # type: ignore[arg-type]
    assert max(rises.values()) < 64, json.dumps(rises, indent=1)


def test_an_alias_bomb_is_refused_before_any_value_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting work, not time: the loader builds nothing of a bomb, at any size (one level more is 9x the
    leaves and the same cost to refuse)."""
    built = [0]
    real = yaml.constructor.SafeConstructor.construct_object

    def spy(self: yaml.constructor.SafeConstructor, node: yaml.Node, deep: bool = False) -> object:
        built[0] += 1
        return real(self, node, deep)

    monkeypatch.setattr(yaml.constructor.SafeConstructor, "construct_object", spy)
    shipped = str(ROOT / "recipes" / "olmo2_60m.yaml")
    load_recipe(shipped, ["data.paths=[a, b]"])  # a real recipe and a real --set value are built
    per_recipe = built[0]
    assert per_recipe > 0
    for levels in (9, 10, 12):
        built[0] = 0
        recipe = tmp_path / f"bomb{levels}.yaml"
        recipe.write_text("model: olmo2_60m\n" + alias_bomb(levels))
        with pytest.raises(ConfigError, match="more than 100,000 values"):
            load_recipe(str(recipe))
        assert built[0] == 0
        with pytest.raises(ConfigError, match="alias bomb"):
            load_recipe(shipped, [f"run_dir={alias_bomb(levels, flow=True)}"])
        assert built[0] < per_recipe  # the shipped recipe's own values only, none of the bomb's


def test_a_value_in_an_error_message_is_shown_cut_short(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: olmo2_60m\nsteps: [" + ", ".join(["x" * 1000] * 500) + "]\n")
    with pytest.raises(ConfigError) as e:
        load_recipe(str(recipe))
    assert "steps must be int" in str(e.value) and len(str(e.value)) < 300
