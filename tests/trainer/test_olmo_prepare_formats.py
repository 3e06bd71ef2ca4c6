"""prepare-data's inputs beyond JSON lines: Parquet (pyarrow), .zst (zstandard), saved Hugging Face datasets folders
(tests/fixtures/hf_datasets, written by `datasets` itself), Arrow files, and --text-field for every record format;
the same documents give the same shards whatever format they come in and whatever --workers, progress counts every
input byte, and damaged or unexpected files are one line each."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from olmo.data import prepare_pipeline as pipe
from olmo.data.corpus import TOKENIZER_PATH, documents
from olmo.data.prepare import InputOptions, dry_run, find_inputs, load_tokenizer, prepare
from olmo.data.readers import ReadOptions
from olmo.data.tasks import Reading

# the optional input extras (parquet, zstd: the dev extra and .ci/run install them); a machine without them, the
# GPU image say, collects the rest of the suite instead of stopping at this file
pa = pytest.importorskip("pyarrow")
zstandard = pytest.importorskip("zstandard")
import pyarrow.feather  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

CLI = Callable[..., tuple[int, str, str]]
HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf_datasets"


def _docs(n: int = 400) -> list[str]:
    return [("  " if i % 4 == 0 else "") + d for i, d in enumerate(documents(n, seed=5))]


def _ids(out: Path) -> list[int]:
    return np.concatenate([np.fromfile(p, dtype=np.uint16) for p in sorted(out.glob("part-*.npy"))]).tolist()


def _want(texts: list[str | None]) -> list[int]:
    tok = load_tokenizer(TOKENIZER_PATH)
    return [t for text in texts if text and text.strip() for t in [*tok.encode([text.strip()])[0], tok.eos_id]]


def _all_formats(tmp: Path, docs: list[str]) -> list[Path]:
    table = pa.table({"id": list(range(len(docs))), "text": docs, "meta": [{"body": d} for d in docs]})
    pq.write_table(table, tmp / "a.parquet", row_group_size=37)
    lines = "".join(json.dumps({"text": d, "meta": {"body": d}}) + "\n" for d in docs).encode()
    half = len(lines) // 2
    cut = lines.index(b"\n", half) + 1
    c = zstandard.ZstdCompressor(level=3)
    (tmp / "b.jsonl.zst").write_bytes(c.compress(lines[:cut]) + c.compress(lines[cut:]))  # two frames
    with pa.OSFile(str(tmp / "c.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=50)
    pyarrow.feather.write_feather(table, str(tmp / "d.arrow"), chunksize=60)  # the Arrow file format
    return [tmp / "a.parquet", tmp / "b.jsonl.zst", tmp / "c.arrow", tmp / "d.arrow"]


@pytest.mark.parametrize("field", ["text", "meta.body"])
def test_every_format_gives_the_same_documents(tmp_path: Path, cli: CLI, field: str) -> None:
    docs = _docs()
    for path in _all_formats(tmp_path, docs):
        out = tmp_path / f"out-{path.name}"
        code, _, err = cli("prepare-data", "-i", str(path), "-o", str(out), "-t", "bundled", "--text-field", field,
                           "--shard-size", "5K")
        assert code == 0, (path, err)
        assert _ids(out) == _want(docs), path


def test_workers_do_not_change_the_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipe, "MIN_POOL_BYTES", 0)
    monkeypatch.setattr(pipe, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(pipe, "CHUNK_MIN", 2000)
    monkeypatch.setattr(pipe, "CHUNK_MAX", 2000)
    inputs = [*_all_formats(tmp_path, _docs(300)), *find_inputs([HF / "train"])]
    tok = load_tokenizer(TOKENIZER_PATH)
    one = prepare(inputs, tmp_path / "w1", tok, shard_tokens=4000, workers=1)
    three = prepare(inputs, tmp_path / "w3", tok, shard_tokens=4000, workers=3)
    assert three.workers == 3
    files = {p.name: p.read_bytes() for p in (tmp_path / "w1").iterdir() if p.name.startswith(("part", "man"))}
    assert len(files) > 10
    assert files == {p.name: p.read_bytes() for p in (tmp_path / "w3").iterdir() if p.name.startswith(("part", "man"))}
    assert {k: vars(v) for k, v in one.stats.items()} == {k: vars(v) for k, v in three.stats.items()}


def test_a_saved_datasets_folder_is_read_in_its_order(tmp_path: Path, cli: CLI) -> None:
    rows = json.loads((HF / "rows.json").read_text())
    code, _, err = cli("prepare-data", "-i", str(HF / "train"), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 0, err
    assert _ids(tmp_path / "o") == _want([r["text"] for r in rows])
    assert "skipped 1 row(s) whose 'text' is not text" in err and "row 8, 'text' is null" in err  # id 7 has no text
    code, _, err = cli("prepare-data", "-i", str(HF / "train"), "-o", str(tmp_path / "b"), "-t", "bundled",
                       "--text-field", "meta.body")
    assert code == 0 and _ids(tmp_path / "b") == _want([r["meta"]["body"] for r in rows])
    code, _, err = cli("prepare-data", "-i", str(HF / "dict"), "-o", str(tmp_path / "d"), "-t", "bundled")
    assert code == 2 and "DatasetDict (splits: train, test)" in err and f"-i {HF / 'dict' / 'train'}" in err
    code, _, err = cli("prepare-data", "-i", str(HF / "dict" / "test"), "-o", str(tmp_path / "t"), "-t", "bundled")
    assert code == 0 and _ids(tmp_path / "t") == _want([r["text"] for r in rows[30:]])


def test_a_folder_search_takes_datasets_whole_and_skips_loose_arrow_caches(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(HF / "train", tmp_path / "data" / "ds")
    (tmp_path / "data" / "x.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "data" / "cache-123.arrow").write_bytes(b"not read")
    (tmp_path / "data" / "loop").symlink_to(tmp_path / "data")  # a cycle is not followed forever
    names = [p.name for p in find_inputs([tmp_path / "data"])]
    assert names == ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow", "x.jsonl"]


@pytest.mark.parametrize("listed", ["../secret.arrow", "/etc/passwd", "sub/x.arrow", "..", "", 7, None])
def test_a_state_json_cannot_point_outside_its_folder(tmp_path: Path, cli: CLI, listed: object) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    (tmp_path / "secret.arrow").write_bytes((HF / "train" / "data-00000-of-00002.arrow").read_bytes())
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": listed}]}))
    code, _, err = cli("prepare-data", "-i", str(ds), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 2 and "not a plain file name" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_parquet_values_over_the_cap_nulls_and_types(tmp_path: Path, cli: CLI) -> None:
    texts = ["short one", "x" * 5000, None, "  another  ", "y" * 2000]
    pq.write_table(pa.table({"text": texts, "n": [1, 2, 3, 4, 5],
                             "blob": [t.encode("latin-1") if t else None for t in texts]}), tmp_path / "a.parquet")
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "o"), "-t",
                       "bundled", "--max-doc-size", "3K")
    assert code == 0 and "skipped 1 document(s) larger than --max-doc-size" in err and "'text' is null" in err
    assert _ids(tmp_path / "o") == _want(["short one", "another", "y" * 2000])
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "b"), "-t",
                       "bundled", "--text-field", "blob", "--encoding", "latin-1")  # a binary column is decoded
    assert code == 0 and _ids(tmp_path / "b") == _want(texts)
    for field, message in (("n", "holds int64, not text"), ("nope", "no text column 'nope' (its columns: text, n")):
        code, _, err = cli("prepare-data", "-i", str(tmp_path / "a.parquet"), "-o", str(tmp_path / "c"), "-t",
                           "bundled", "--text-field", field)
        assert code == 2 and message in err and not (tmp_path / "c").exists(), err


def test_dictionary_and_large_string_columns(tmp_path: Path, cli: CLI) -> None:
    docs = _docs(50)
    table = pa.table({"text": pa.array(docs, pa.large_string()).dictionary_encode()})
    pq.write_table(table, tmp_path / "a.parquet", use_dictionary=True)
    with pa.OSFile(str(tmp_path / "b.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    for name in ("a.parquet", "b.arrow"):
        code, _, err = cli("prepare-data", "-i", str(tmp_path / name), "-o", str(tmp_path / f"o{name}"), "-t",
                           "bundled")
        assert code == 0 and _ids(tmp_path / f"o{name}") == _want(docs), err


_GOOD_ZST = zstandard.ZstdCompressor().compress(json.dumps({"text": " ".join(documents(20))}).encode() + b"\n")


@pytest.mark.parametrize(("name", "data", "message"), [
    ("cut.jsonl.zst", zstandard.ZstdCompressor().compress(b'{"text": "a"}\n' * 5000)[:-9], "cut short"),
    ("plain.jsonl.zst", b'{"text": "not compressed"}\n', "it is not zstd data"),
    ("bad.jsonl.zst", _GOOD_ZST[:12] + bytes(b ^ 0x5A for b in _GOOD_ZST[12:60]) + _GOOD_ZST[60:],
     "zstd data is corrupt"),
    ("plain.parquet", b'{"text": "not parquet"}\n', "it is not a Parquet file"),
    ("torn.parquet", b"PAR1" + b"\x00" * 100, "cannot read it as Parquet data"),
    ("torn.arrow", b"\xff\xff\xff\xff\x10\x00\x00\x00garbage", "cannot read it as Arrow data"),
])
def test_damaged_files_are_one_line(tmp_path: Path, cli: CLI, name: str, data: bytes, message: str) -> None:
    (tmp_path / name).write_bytes(data)
    code, _, err = cli("prepare-data", "-i", str(tmp_path / name), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_a_zstd_frame_asking_for_a_huge_window_is_refused(tmp_path: Path, cli: CLI) -> None:
    params = zstandard.ZstdCompressionParameters(window_log=31, enable_ldm=True)  # `zstd --long=31`
    data = zstandard.ZstdCompressor(compression_params=params).compress(b'{"text": "a"}\n' * 100)
    # a streamed frame (no content size) declares its window; write one the way `zstd --long=31` does
    chunker = zstandard.ZstdCompressor(compression_params=params).compressobj()
    streamed = chunker.compress(b'{"text": "a"}\n' * 100) + chunker.flush()
    assert data and streamed
    (tmp_path / "w.jsonl.zst").write_bytes(streamed)
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "w.jsonl.zst"), "-o", str(tmp_path / "o"), "-t",
                       "bundled")
    assert code == 2 and "window over 128 MiB" in err, err


def test_progress_counts_every_input_byte(tmp_path: Path) -> None:
    inputs = [*_all_formats(tmp_path, _docs(200)), *find_inputs([HF / "train"])]
    seen = [0]

    def progress(nbytes: int, _tokens: int) -> None:
        seen[0] += nbytes

    tok = load_tokenizer(TOKENIZER_PATH)
    res = prepare(inputs, tmp_path / "o", tok, shard_tokens=3000, progress=progress)
    assert seen[0] == sum(p.stat().st_size for p in inputs)
    seen[0] = 0
    counted = dry_run(inputs, tok, progress=progress)  # --dry-run shows the same bar
    assert seen[0] == sum(p.stat().st_size for p in inputs)
    assert sum(st.tokens for st in counted.values()) == sum(s.num_tokens for s in res.shards)


def test_an_interrupted_parquet_job_resumes_to_the_same_shards(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipe, "CHUNK_MIN", 1000)  # many tasks, so shards finish before the interruption
    inputs = _all_formats(tmp_path, _docs(300))[:1] + find_inputs([HF / "train"])
    tok = load_tokenizer(TOKENIZER_PATH)
    clean = prepare(inputs, tmp_path / "clean", tok, shard_tokens=2000)
    seen = [0]

    def stop_halfway(_nbytes: int, ntok: int) -> None:
        seen[0] += ntok
        if seen[0] > sum(s.num_tokens for s in clean.shards) // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare(inputs, tmp_path / "out", tok, shard_tokens=2000, progress=stop_halfway)
    again = prepare(inputs, tmp_path / "out", tok, shard_tokens=2000)
    assert again.resumed_from > 0
    assert [s.sha256 for s in again.shards] == [s.sha256 for s in clean.shards]


def test_reading_options_are_part_of_the_job(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": " x ", "body": "y"}) + "\n")
    tok = load_tokenizer(TOKENIZER_PATH)
    prepare([tmp_path / "a.jsonl"], tmp_path / "o", tok, shard_tokens=100)
    from olmo.config import ConfigError

    other = InputOptions(ReadOptions(("body",)), Reading(("body",)))
    with pytest.raises(ConfigError, match="different prepare-data run"):
        prepare([tmp_path / "a.jsonl"], tmp_path / "o", tok, shard_tokens=100, options=other)
    with pytest.raises(ConfigError, match="different prepare-data run"):
        prepare([tmp_path / "a.jsonl"], tmp_path / "o", tok, shard_tokens=100,
                options=InputOptions(reading=Reading(strip=False)))


def test_a_missing_extra_is_one_line_naming_it(tmp_path: Path, cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    (tmp_path / "a.parquet").write_bytes(b"PAR1....PAR1")
    (tmp_path / "b.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd....")
    for module, name, extra in (("pyarrow", "a.parquet", "olmo-doctor[parquet]"),
                                ("zstandard", "b.jsonl.zst", "olmo-doctor[zstd]")):
        with monkeypatch.context() as m:
            m.setitem(sys.modules, module, None)  # import fails as if not installed
            code, _, err = cli("prepare-data", "-i", str(tmp_path / name), "-o", str(tmp_path / "o"), "-t", "bundled")
        assert code == 2 and f"pip install '{extra}'" in err and len(err.strip().splitlines()) == 1, err
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "pyarrow", None)
        code, _, err = cli("prepare-data", "-i", str(HF / "train"), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 2 and "pip install 'olmo-doctor[datasets]'" in err


def test_a_fifo_is_refused_not_read(tmp_path: Path, cli: CLI) -> None:
    import os

    os.mkfifo(tmp_path / "pipe.jsonl")  # opening it to read would block until a writer came
    code, _, err = cli("prepare-data", "-i", str(tmp_path / "pipe.jsonl"), "-o", str(tmp_path / "o"), "-t", "bundled")
    assert code == 2 and "is not a regular file" in err
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "in.jsonl")
    (tmp_path / "d" / "a.jsonl").write_text('{"text": "x"}\n')
    assert [p.name for p in find_inputs([tmp_path / "d"])] == ["a.jsonl"]  # a folder's FIFO is passed over


def test_zstd_frames_walker_knows_where_frames_end() -> None:
    """A file cut anywhere inside a frame is incomplete; cut between frames (or whole), complete. Frames with and
    without checksums and content sizes, a skippable frame, and an RLE block are all walked."""
    from olmo.data.compressed import ZstdFrames

    text = json.dumps({"text": " ".join(documents(30))}).encode()
    frames = [zstandard.ZstdCompressor(write_checksum=True).compress(text),
              b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"skip!",  # a skippable frame
              zstandard.ZstdCompressor(write_content_size=False).compress(b"a" * 100_000),  # RLE-friendly
              zstandard.ZstdCompressor(level=19).compress(text * 3)]
    data = b"".join(frames)
    ends = {0}
    for f in frames:
        ends.add(max(ends) + len(f))
    for cut in range(len(data) + 1):
        walker = ZstdFrames()
        walker.feed(data[:cut])
        assert walker.complete == (cut in ends), cut
    walker = ZstdFrames()
    for k in range(0, len(data), 7):  # fed in small pieces, as a stream reader does
        walker.feed(data[k:k + 7])
    assert walker.complete
