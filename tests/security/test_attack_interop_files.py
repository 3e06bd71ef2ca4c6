"""Attacks through the files beside a model's weights and through the counts a checkpoint's files declare:

- a Hugging Face folder is a code repository too: `modeling_*.py`/`configuration_*.py` named by config.json's
  `auto_map` (transformers runs them with trust_remote_code), and pickles beside the safetensors
  (`training_args.bin`, `optimizer.pt`, `rng_state.pth`). import-hf must run and unpickle none of them.
- a safetensors header is data: a header length of 2**62, a header nested 100,000 deep, a tensor declared far
  larger than config.json implies (a sparse file costs no disk but reading it costs its declared size), an index
  whose weight_map names `../` or an absolute path.
- a DCP `.metadata` is a pickle whose own length fields size what the unpickler allocates: a 1 GiB file that
  declares a 1 GiB bytes object made the reader take 1.3 GB before it said the file was damaged.
- config.json asking for a model no machine holds (vocab_size 10**12), a `checkpoints/latest` naming a folder
  outside the run.

Each asserts the attack did not work: no marker file, a one-line refusal with exit 2, and for the sizes the work
done (the weight loader never called; the child's peak memory). Sources: transformers' trust_remote_code /
auto_map loading, the safetensors format (8-byte little-endian header length, JSON header), torch's DCP
`.metadata` pickle, the red-team classes "checkpoints that run code" and "manifests with huge counts".
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _bounds_measure import child_python
from _crafted import Payload, Victim

from olmo.data.corpus import TOKENIZER_PATH

Cli = Callable[..., tuple[int, str]]
GIB = 1 << 30


def refused(code: int, err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("olmo: ") and "Traceback" not in err, err
    assert all(w in lines[0] for w in words), lines[0]


@pytest.fixture(scope="module")
def exported(victim: Victim, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from olmo.interop.hf import export_hf

    out = tmp_path_factory.mktemp("hf") / "model"
    export_hf(victim.run / "checkpoints" / "step2", out, tokenizer=TOKENIZER_PATH)
    return out


@pytest.fixture
def hf(exported: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "hf"
    shutil.copytree(exported, dst)
    return dst


def _safetensors(path: Path, header: bytes, size: int | None = None, length: int | None = None) -> None:
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(header) if length is None else length))
        f.write(header)
        if size is not None:
            f.truncate(size)


def test_remote_code_and_pickles_in_a_model_folder_never_run(hf: Path, tmp_path: Path, olmo_cli: Cli) -> None:
    marker = tmp_path / "marker"
    code_py = f"open({str(marker)!r}, 'a').write('ran')\n"
    for name in ("modeling_olmo2.py", "configuration_olmo2.py", "tokenization_olmo2.py", "__init__.py"):
        (hf / name).write_text(code_py)
    config = json.loads((hf / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_olmo2.Olmo2Config",
                          "AutoModelForCausalLM": "modeling_olmo2.Olmo2ForCausalLM"}
    (hf / "config.json").write_text(json.dumps(config))
    for name in ("training_args.bin", "optimizer.pt", "rng_state.pth", "scheduler.pt", "pytorch_model.bin"):
        torch.save(Payload(marker), hf / name)
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    assert code == 0, err  # the safetensors weights are all it needs
    assert not marker.exists(), "code from the model folder ran"


@pytest.mark.parametrize("case", ["header-length-2**62", "header-nested-deep", "header-not-json"])
def test_a_hostile_safetensors_header_is_one_line(case: str, hf: Path, tmp_path: Path, olmo_cli: Cli) -> None:
    st = hf / "model.safetensors"
    if case == "header-length-2**62":
        _safetensors(st, b"{}", length=1 << 62)
    elif case == "header-nested-deep":
        _safetensors(st, b"[" * 100_000 + b"]" * 100_000)
    else:
        _safetensors(st, b"\xff\xfe not json")
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    refused(code, err, "model.safetensors")
    assert not (tmp_path / "out").exists()


def test_a_tensor_declared_larger_than_the_config_is_refused_unread(hf: Path, tmp_path: Path, olmo_cli: Cli,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A sparse 3 GiB file declaring the embedding as 800 million floats: the header says so, and the loader
    must not be asked to read it (its work would be the declared size)."""
    import safetensors.torch

    n = 3 * GIB
    header = json.dumps({"model.embed_tokens.weight": {"dtype": "F32", "shape": [n // 4],
                                                       "data_offsets": [0, n]}}).encode()
    header += b" " * (-len(header) % 8)
    _safetensors(hf / "model.safetensors", header, size=8 + len(header) + n)
    calls: list[str] = []
    real = safetensors.torch.load_file
    monkeypatch.setattr(safetensors.torch, "load_file", lambda *a, **k: calls.append(str(a[0])) or real(*a, **k))
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    refused(code, err, "model.embed_tokens.weight", "(805306368,)")
    assert calls == [], "the oversized file was read before its declared shape was checked"


@pytest.mark.parametrize("name", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/../../x.safetensors"])
def test_an_index_naming_files_outside_the_folder_is_refused(name: str, hf: Path, tmp_path: Path,
                                                             olmo_cli: Cli) -> None:
    shutil.copy(hf / "model.safetensors", tmp_path / "outside.safetensors")
    (hf / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"model.embed_tokens.weight": name}}))
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    refused(code, err, "outside the model folder")


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "model.safetensors.index.json"])
def test_a_model_file_linked_from_outside_the_folder_is_refused(name: str, hf: Path, tmp_path: Path,
                                                                olmo_cli: Cli) -> None:
    """The attack: a cloned model folder whose weights, config or index is a symlink to a file elsewhere (any file
    the user can read would be taken in); import-hf reads only the folder's own files, as it does tokenizer.json.
    (found by a red-team pass: the tokenizer was checked, the weights were not)"""
    if name == "model.safetensors.index.json":
        (tmp_path / "elsewhere.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model.safetensors"}}))
    else:
        shutil.move(hf / name, tmp_path / "elsewhere")
        if name == "config.json":
            (tmp_path / "elsewhere.json").write_bytes((tmp_path / "elsewhere").read_bytes())
    target = tmp_path / ("elsewhere.json" if name.endswith(".json") else "elsewhere")
    (hf / name).symlink_to(target)
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    refused(code, err, "outside", name)
    assert not (tmp_path / "out").exists()


def test_the_hub_caches_snapshot_links_are_still_read(hf: Path, tmp_path: Path, olmo_cli: Cli) -> None:
    """What the rule must keep working: `hf download` without --local-dir leaves a snapshot folder of links into
    the cache's blobs/ folder; those are the model's own files."""
    snapshot = tmp_path / "models--x--y" / "snapshots" / "abc123"
    blobs = tmp_path / "models--x--y" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for f in hf.iterdir():
        shutil.copy(f, blobs / f"sha-{f.name}")
        (snapshot / f.name).symlink_to(Path("../../blobs") / f"sha-{f.name}")
    code, err = olmo_cli("import-hf", str(snapshot), str(tmp_path / "out"))
    assert code == 0, err
    assert (tmp_path / "out").is_dir()


def test_a_config_asking_for_a_trillion_token_vocabulary_is_refused(hf: Path, tmp_path: Path, olmo_cli: Cli) -> None:
    config = json.loads((hf / "config.json").read_text())
    config["vocab_size"] = 10**12
    (hf / "config.json").write_text(json.dumps(config))
    code, err = olmo_cli("import-hf", str(hf), str(tmp_path / "out"))
    refused(code, err, "config.json")


def test_a_latest_pointer_naming_a_folder_outside_the_run_is_ignored(victim: Victim, tmp_path: Path) -> None:
    from olmo.checkpoint import latest

    run = victim.copy(tmp_path / "run")
    outside = victim.copy(tmp_path / "other")
    for name in ("../../other/checkpoints/step2", str(outside / "checkpoints" / "step2"), "step2/../../../other"):
        (run / "checkpoints" / "latest").write_text(name)
        assert latest(run) == run / "checkpoints" / "step2"


def test_a_metadata_pickle_declaring_a_gigabyte_is_refused_by_its_size(tmp_path: Path) -> None:
    ck = tmp_path / "step2"
    ck.mkdir()
    with (ck / ".metadata").open("wb") as f:  # BINBYTES8 of 1 GiB: the unpickler would allocate it first
        f.write(b"\x80\x04\x8e" + struct.pack("<Q", GIB))
        f.truncate(GIB + 64)
    got = child_python("""
        import json, resource, sys
        from pathlib import Path
        from olmo.checkpoint_reader import read_metadata
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            read_metadata(Path(sys.argv[1]))
            out = {"returned": True}
        except Exception as e:
            out = {"error": type(e).__name__, "message": str(e)}
        out["rise_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
        print(json.dumps(out))
    """, str(ck))
    result = got["result"]
    assert result is not None, got["err"]
    assert result.get("error") == "ConfigError" and "larger than" in result["message"], result
    assert result["rise_mb"] < 200, result


def _edit_state(ck: Path, edit: Callable[[dict], None]) -> None:
    state = json.loads((ck / "train_state.json").read_text())
    edit(state)
    (ck / "train_state.json").write_text(json.dumps(state))


def _set(path: str, value: object) -> Callable[[dict], None]:
    def edit(state: dict) -> None:
        *parents, last = path.split(".")
        node = state
        for key in parents:
            node = node[key]
        if value is _DROP:
            del node[last]
        else:
            node[last] = value
    return edit


_DROP = object()
STATE_EDITS = [
    ("position-as-a-string", "data_loader.batch_in_epoch", "2"),
    ("step-as-a-string", "step", "2"),
    ("tokens-seen-null", "tokens_seen", None),
    ("negative-epoch", "data_loader.epoch", -1),
    ("position-past-the-epoch", "data_loader.batch_in_epoch", 10**15),
    ("no-data-position", "data_loader", _DROP),
    ("no-step", "step", _DROP),
    ("batch-size-zero", "data_loader.global_batch_size", 0),
]


@pytest.mark.parametrize(("path", "value"), [(p, v) for _, p, v in STATE_EDITS], ids=[i for i, _, _ in STATE_EDITS])
def test_resume_refuses_counters_a_checkpoint_cannot_have(path: str, value: object, victim: Victim, tmp_path: Path,
                                                         olmo_cli: Cli) -> None:
    """train_state.json is data: a count that is a string, negative, missing, or a data position past the end of
    an epoch was a traceback mid-resume (TypeError, KeyError) or a silent resume from a position that cannot be."""
    run = victim.copy(tmp_path / "run")
    _edit_state(run / "checkpoints" / "step2", _set(path, value))
    code, err = olmo_cli("train", str(victim.recipe(tmp_path, run)), "--resume", "--skip-doctor")
    refused(code, err, "damaged")
    assert not (run / "checkpoints" / "step4").exists()


def test_a_manifest_claiming_a_quadrillion_tokens_is_refused(victim: Victim, tmp_path: Path, olmo_cli: Cli) -> None:
    data = tmp_path / "data"
    shutil.copytree(victim.data, data)
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["num_tokens"] = manifest["shards"][0]["num_tokens"] = 10**15
    (data / "manifest.json").write_text(json.dumps(manifest))
    recipe = victim.recipe(tmp_path, tmp_path / "run", steps=1)
    recipe.write_text(recipe.read_text().replace(str(victim.data), str(data)))
    code, err = olmo_cli("train", str(recipe), "--skip-doctor")
    refused(code, err, "1,000,000,000,000,000")


HOSTILE_NAME = "hf'); __import__('os').system('touch MARK'); (' $(touch MARK2);`touch MARK3`"


def test_printed_next_steps_keep_a_hostile_folder_name_a_string(victim: Victim, tmp_path: Path,
                                                                olmo_cli: Cli) -> None:
    """export-hf prints a Python line to load the model and import-hf the shell lines to fine-tune it; a folder
    named with quotes, `$(...)` and backticks must stay one string in each when pasted (it became code in the
    Python line before)."""
    import ast
    import re
    import shlex

    out = tmp_path / HOSTILE_NAME
    code, err = olmo_cli("export-hf", str(victim.run / "checkpoints" / "step2"), str(out), "--tokenizer",
                         str(TOKENIZER_PATH))
    assert code == 0, err
    printed = olmo_cli.out + err  # type: ignore[attr-defined]
    snippet = re.search(r"transformers\.AutoModelForCausalLM\.from_pretrained\(.*\)$", printed, re.M)
    assert snippet, printed
    tree = ast.parse(snippet.group(0))
    assert len(tree.body) == 1 and isinstance(call := tree.body[0].value, ast.Call), snippet.group(0)  # type: ignore[attr-defined]
    assert ast.literal_eval(call.args[0]) == str(out)
    ck = tmp_path / ("ck " + HOSTILE_NAME)
    code, err = olmo_cli("import-hf", str(out), str(ck))
    assert code == 0, err
    lines = [ln.strip() for ln in (olmo_cli.out + err).splitlines() if ln.strip().startswith("olmo ")]  # type: ignore[attr-defined]
    assert lines, err
    for line in lines:
        words = shlex.split(line)
        assert any(w.startswith(str(ck)) for w in words), (line, words)
    assert not list(tmp_path.glob("MARK*"))
