"""Token shards: prepare -> validate round trip, the on-disk format, corruption detection, interrupted runs,
--dry-run, and the loader's order, rank slices and exact resume."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from olmo.config import ConfigError, DataConfig
from olmo.data.corpus import CORPUS_PATH, TOKENIZER_PATH, documents
from olmo.data.loader import ShardLoader, TokenWindows, open_source, split_indices
from olmo.data.prepare import find_inputs, load_tokenizer, prepare
from olmo.data.shards import validate_dir

CLI = Callable[..., tuple[int, str, str]]


def _docs(n: int = 300) -> list[str]:
    return list(documents(n, seed=7))


def _write_inputs(tmp: Path) -> list[Path]:
    docs = _docs()
    a, b = tmp / "a.jsonl.gz", tmp / "b.jsonl"
    with gzip.open(a, "wt") as f:
        f.writelines(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs[:200]))
    b.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[200:290]))
    (tmp / "c.txt").write_text("\n\n".join(docs[290:]))  # a .txt file is one document
    return [a, b, tmp / "c.txt"]


def test_round_trip_is_olmo_core_format(tmp_path: Path, cli: CLI) -> None:
    inputs = _write_inputs(tmp_path)
    code, out, err = cli("prepare-data", "-i", str(inputs[0]), "-i", str(inputs[1]), "-i", str(inputs[2]),
                         "-o", str(tmp_path / "out"), "-t", str(TOKENIZER_PATH), "--shard-size", "4K")
    assert code == 0, err
    assert "291 documents" in out and "dtype uint16, vocab 766, EOS id 0" in out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["dtype"] == "uint16" and manifest["vocab_size"] == 766 and manifest["eos_id"] == 0
    assert manifest["num_docs"] == 291 and len(manifest["shards"]) > 3

    # What OLMo-core's NumpyFSLDataset does: memmap each headerless file with the dtype and concatenate.
    tok = load_tokenizer(TOKENIZER_PATH)
    want = []
    docs = _docs()
    for text in [*docs[:290], "\n\n".join(docs[290:])]:
        want += tok.encode([text])[0] + [0]
    got = []
    for shard in manifest["shards"]:
        path = tmp_path / "out" / shard["file"]
        assert not path.read_bytes().startswith(b"\x93NUMPY")  # raw tokens, not NumPy's .npy format
        arr = np.memmap(path, dtype=np.uint16, mode="r")
        assert arr.size == shard["num_tokens"] and arr[-1] == 0  # each shard ends on a document
        assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"]
        got += arr.tolist()
    assert got == want

    code, out, _ = cli("validate-shards", str(tmp_path / "out"))
    assert code == 0 and "ok: " in out and "part-00000.npy" in out


def test_large_vocab_uses_uint32(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<|endoftext|>": 0, "[UNK]": 1} | {f"w{i}": i + 2 for i in range(70_000)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "big.json"))
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": "w1 w69999 w65536"}) + "\n")
    res = prepare([tmp_path / "d.jsonl"], tmp_path / "out", load_tokenizer(tmp_path / "big.json"), 1000)
    assert res.shards[0].dtype == "uint32"
    assert np.memmap(tmp_path / "out" / "part-00000.npy", dtype=np.uint32, mode="r").tolist() == [3, 70001, 65538, 0]
    assert not validate_dir(tmp_path / "out")[0].problems


@pytest.fixture
def shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled corpus as one shard (91,215 tokens), with a CRC per 4 KiB instead of per MiB so that the
    localisation of a damaged block is visible at this size."""
    import olmo.data.prepare
    import olmo.data.shards

    monkeypatch.setattr(olmo.data.shards, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(olmo.data.prepare, "BLOCK_BYTES", 4096)
    out = tmp_path / "s"
    prepare(find_inputs([CORPUS_PATH]), out, load_tokenizer(TOKENIZER_PATH), shard_tokens=600_000)
    return out


def test_bit_flip_is_located(shards: Path, cli: CLI) -> None:
    path = shards / "part-00000.npy"
    raw = bytearray(path.read_bytes())
    raw[70_001] ^= 0x01  # the high byte of token 35,000: its id changes by 256, maybe still a valid id
    path.write_bytes(bytes(raw))
    code, _, err = cli("validate-shards", str(shards))
    assert code == 1
    # byte 70,001 is in the 18th 4 KiB block: tokens 34,816..36,863
    assert "olmo: corrupt: part-00000.npy at token 34,816: checksum mismatch: the bytes of tokens 34,816..36,863" in err


def test_out_of_range_id_exact_offset(shards: Path, cli: CLI) -> None:
    arr = np.memmap(shards / "part-00000.npy", dtype=np.uint16, mode="r+")
    arr[12_345] = 5000  # vocab is 766
    arr.flush()
    code, out, err = cli("validate-shards", str(shards))
    assert code == 1
    assert "olmo: corrupt: part-00000.npy at token 12,345: token id 5000 is outside the vocabulary (size 766)" in err
    assert "token id 5000 is outside" in out  # the table's status column too


def test_truncation_and_missing_shard(shards: Path, cli: CLI) -> None:
    path = shards / "part-00000.npy"
    path.write_bytes(path.read_bytes()[:100_000])
    code, _, err = cli("validate-shards", str(shards))
    assert code == 1 and "at token 50,000: 50,000 tokens on disk but the metadata says 91,215" in err
    path.unlink()
    code, _, err = cli("validate-shards", str(shards))
    assert code == 1 and "olmo: corrupt: part-00000.npy: file is missing" in err


def test_bare_shards_need_vocab_size(tmp_path: Path, cli: CLI) -> None:
    np.array([1, 2, 3, 100_000], dtype=np.uint32).tofile(tmp_path / "x.npy")
    code, _, err = cli("validate-shards", str(tmp_path))
    assert code == 2 and err.startswith("olmo: ") and "--vocab-size" in err and len(err.splitlines()) == 1
    code, out, _ = cli("validate-shards", str(tmp_path), "--vocab-size", "100278")
    assert code == 0 and "100000" in out
    # a 30,000 vocab means uint16, so the uint32 file reads as garbage: 100,000's low half is 34,464
    code, _, err = cli("validate-shards", str(tmp_path), "--vocab-size", "30000")
    assert code == 1 and "wrong --vocab-size or dtype?" in err


def test_interrupted_prepare_resumes_to_identical_shards(tmp_path: Path) -> None:
    tok = load_tokenizer(TOKENIZER_PATH)
    inputs = find_inputs([CORPUS_PATH])
    clean = prepare(inputs, tmp_path / "clean", tok, shard_tokens=10_000)
    out = tmp_path / "crashed"
    prepare(inputs, out, tok, shard_tokens=10_000)
    # The state a kill leaves: no manifest, the last shards unfinished (no sidecar), a temp file mid-write.
    (out / "manifest.json").unlink()
    for name in ("part-00007", "part-00008", "part-00009"):
        (out / f"{name}.json").unlink()
    (out / "part-00009.npy").unlink()
    (out / ".part-00009.npy.tmp").write_bytes(b"\x01\x02garbage")
    again = prepare(inputs, out, tok, shard_tokens=10_000)
    assert again.resumed_from == 7
    assert [s.sha256 for s in again.shards] == [s.sha256 for s in clean.shards]
    assert not list(out.glob(".*.tmp"))
    assert prepare(inputs, out, tok, shard_tokens=10_000).already_done
    with pytest.raises(ConfigError, match="different prepare-data run"):
        prepare(inputs, out, tok, shard_tokens=20_000)
    assert len(prepare(inputs, out, tok, shard_tokens=20_000, overwrite=True).shards) == 5


def test_dry_run_flags_bad_files(tmp_path: Path, cli: CLI) -> None:
    (tmp_path / "good.jsonl").write_text(json.dumps({"text": "Ada walked to the river."}) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "broken.jsonl").write_text('{"text": "ok"}\nnot json\n{"body": "no text field"}\n')
    code, out, err = cli("prepare-data", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "-t", "bundled",
                         "--dry-run")
    assert code == 1
    rows = {ln.split()[0].rsplit("/", 1)[-1]: ln.split()[1:] for ln in out.splitlines() if ".jsonl" in ln}
    # documents, tokens, empty, bad lines, oversized, undecodable, encoding, flag
    assert rows["empty.jsonl"] == ["0", "0", "0", "0", "0", "0", "utf-8", "no", "documents"]
    assert rows["broken.jsonl"][0] == "1" and rows["broken.jsonl"][3:] == ["2", "0", "0", "utf-8", "unparseable",
                                                                          "lines"]
    assert rows["good.jsonl"][:2] == ["1", "7"]  # 6 tokens + EOS
    assert "2 input file(s) flagged" in err
    assert not (tmp_path / "o").exists()


def test_prepare_usage_errors(tmp_path: Path, cli: CLI) -> None:
    (tmp_path / "x.csv").write_text("a,b\n")
    (tmp_path / "bad.json").write_text("{}")
    cases = [(["-i", str(tmp_path / "x.csv"), "-t", "bundled"], "unsupported input type"),
             (["-i", str(tmp_path / "nope.jsonl"), "-t", "bundled"], "does not exist"),
             (["-i", str(CORPUS_PATH), "-t", "bundled", "--shard-size", "lots"], "'lots' is not a count"),
             (["-i", str(CORPUS_PATH), "-t", str(tmp_path / "bad.json")], "is not a Hugging Face tokenizer")]
    for args, msg in cases:
        code, _, err = cli("prepare-data", *args, "-o", str(tmp_path / "o"))
        assert code == 2 and err.startswith("olmo: ") and msg in err and len(err.splitlines()) == 1, (args, err)
    assert not (tmp_path / "o").exists()


# -------------------------------------------------------------------------------------------------- loader
def _windows(tiny_data: Path, seq: int = 64) -> TokenWindows:
    return TokenWindows(open_source([str(tiny_data)], DataConfig()), seq)


def test_windows_are_per_shard_chunks(tiny_data: Path) -> None:
    w = _windows(tiny_data)
    sizes = [s["num_tokens"] for s in json.loads((tiny_data / "manifest.json").read_text())["shards"]]
    assert len(w) == sum(n // 64 for n in sizes)  # each file chunked separately, remainders dropped
    first_of_shard1 = sizes[0] // 64
    shard1 = np.memmap(tiny_data / "part-00001.npy", dtype=np.uint16, mode="r")
    assert w.get(np.array([first_of_shard1]))[0].tolist() == shard1[:64].tolist()


def test_loader_order_ranks_and_resume(tiny_data: Path) -> None:
    w = _windows(tiny_data)
    idx = np.arange(len(w))
    full = ShardLoader(w, idx, 8, 4, seed=3)
    batches = [full.next_batch() for _ in range(5)]
    assert all(len(b) == 2 and b[0].shape == (4, 64) for b in batches)
    # two ranks split each global batch: together they hold exactly the single-process batch
    r0, r1 = ShardLoader(w, idx, 8, 2, seed=3, rank=0, world_size=2), ShardLoader(w, idx, 8, 2, seed=3, rank=1,
                                                                                  world_size=2)
    b0, b1 = r0.next_batch(), r1.next_batch()
    one = {tuple(r.tolist()) for mb in batches[0] for r in mb}
    assert {tuple(r.tolist()) for mb in b0 + b1 for r in mb} == one
    # resume: a new loader restored from the state continues with the very next batch
    resumed = ShardLoader(w, idx, 8, 4, seed=99)
    ref = ShardLoader(w, idx, 8, 4, seed=3)
    for _ in range(3):
        ref.next_batch()
    resumed.load_state_dict(ref.state_dict())
    assert all(torch_equal(a, b) for a, b in zip(resumed.next_batch(), batches[3], strict=True))
    # epochs: every window once per epoch, then a new order
    small = ShardLoader(w, idx[:16], 8, 8, seed=0)
    e0 = [small.next_batch()[0] for _ in range(2)]
    e1 = [small.next_batch()[0] for _ in range(2)]
    rows0 = sorted(tuple(r.tolist()) for b in e0 for r in b)
    assert rows0 == sorted(tuple(r.tolist()) for b in e1 for r in b) and len(set(rows0)) == 16
    assert small.epoch == 1 and not all(torch_equal(a, b) for a, b in zip(e0, e1, strict=True))


def torch_equal(a: object, b: object) -> bool:
    import torch

    return bool(torch.equal(a, b))  # type: ignore[arg-type]


def test_loader_rejects_other_data(tiny_data: Path) -> None:
    ref = ShardLoader(_windows(tiny_data, 64), np.arange(100), 8, 4, seed=0)
    other = ShardLoader(_windows(tiny_data, 32), np.arange(100), 8, 4, seed=0)
    with pytest.raises(ConfigError, match="different data"):
        other.load_state_dict(ref.state_dict())
    with pytest.raises(ConfigError, match="fewer than one global batch"):
        ShardLoader(_windows(tiny_data), np.arange(5), 8, 4, seed=0)


def test_val_split_is_disjoint_and_seed_independent() -> None:
    train_idx, val_idx = split_indices(1000, 0.05)
    assert 20 < len(val_idx) < 80 and not set(train_idx) & set(val_idx) and len(train_idx) + len(val_idx) == 1000
    assert np.array_equal(split_indices(1000, 0.05)[1], val_idx)


def test_no_documents_is_a_usage_error(tmp_path: Path, cli: CLI) -> None:
    (tmp_path / "empty.jsonl").write_text("\n\n")
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "empty.jsonl"), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 2 and "hold no documents" in err and not (tmp_path / "o" / "manifest.json").exists()
