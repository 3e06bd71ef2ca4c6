"""prepare-data with worker processes: byte-identical output for any --workers, resume after an interruption
(Ctrl-C in-process, and a SIGKILL of the whole command), and no worker left behind."""

from __future__ import annotations

import gzip
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest

from olmo.data import prepare_pipeline as pipe
from olmo.data.corpus import TOKENIZER_PATH, documents, write_jsonl
from olmo.data.prepare import LoadedTokenizer, find_inputs, load_tokenizer, prepare

CLI = Callable[..., tuple[int, str, str]]


@pytest.fixture
def tiny_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers even for tiny inputs, and ~1 KB tasks, so that lines and files straddle many task boundaries."""
    monkeypatch.setattr(pipe, "MIN_POOL_BYTES", 0)
    monkeypatch.setattr(pipe, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(pipe, "CHUNK_MIN", 1000)
    monkeypatch.setattr(pipe, "CHUNK_MAX", 1000)


def _corpus(tmp: Path) -> tuple[list[Path], list[str]]:
    """Four inputs with every kind of line prepare-data meets; returns them and the documents it must keep."""
    docs = list(documents(260, seed=11))
    a, b, c, d = tmp / "a.jsonl.gz", tmp / "b.jsonl", tmp / "c.txt", tmp / "d.jsonl"
    lines = [json.dumps({"text": t, "id": i}) for i, t in enumerate(docs[:150])]
    lines[3:3] = ["not json", "", json.dumps({"text": "   "}), json.dumps({"body": "x"}), json.dumps([1])]
    with gzip.open(a, "wt") as f:
        f.write("\n".join(lines) + "\n")
    long_doc = " ".join(docs[150:190])  # one line several tasks long
    b.write_text("\n".join(json.dumps({"text": t}) for t in [long_doc, *docs[190:250]]))  # no final newline
    c.write_text("\n\n".join(docs[250:]))
    d.write_text("")
    return [a, b, c, d], [*docs[:150], long_doc, *docs[190:250], "\n\n".join(docs[250:])]


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_output_is_identical_for_any_worker_count(tmp_path: Path, tiny_tasks: None, cli: CLI) -> None:
    inputs, kept = _corpus(tmp_path)
    tok = load_tokenizer(TOKENIZER_PATH)
    one = prepare(inputs, tmp_path / "w1", tok, shard_tokens=3000, workers=1)
    three = prepare(inputs, tmp_path / "w3", tok, shard_tokens=3000, workers=3)
    assert (one.workers, three.workers) == (0, 3)  # in-process vs. three worker processes, really
    args = [a for p in inputs for a in ("-i", str(p))]
    code, out, err = cli("prepare-data", *args, "-o", str(tmp_path / "w2"), "-t", "bundled", "--shard-size", "3K",
                         "--workers", "2")
    assert code == 0, err
    assert "2 worker process(es)" in out and "skipped 3 line(s)" in err and "(first: line 4, not JSON)" in err
    assert "skipped 1 empty document(s)" in err
    ref = _files(tmp_path / "w1")
    assert len([n for n in ref if n.endswith(".npy")]) > 5
    assert _files(tmp_path / "w3") == ref and _files(tmp_path / "w2") == ref  # shards, sidecars, manifest
    assert {k: vars(v) for k, v in three.stats.items()} == {k: vars(v) for k, v in one.stats.items()}
    # and what they all hold is every kept document, in order, each followed by EOS
    want = np.concatenate([np.array([*tok.encode([t])[0], tok.eos_id], dtype=np.uint16) for t in kept])
    got = np.concatenate([np.fromfile(tmp_path / "w3" / n, dtype=np.uint16) for n in sorted(ref) if ".npy" in n])
    assert np.array_equal(got, want)


def test_dry_run_with_workers_counts_the_same(tmp_path: Path, tiny_tasks: None) -> None:
    from olmo.data.prepare import dry_run

    inputs, _ = _corpus(tmp_path)
    tok = load_tokenizer(TOKENIZER_PATH)
    assert {k: vars(v) for k, v in dry_run(inputs, tok, workers=2).items()} == \
        {k: vars(v) for k, v in dry_run(inputs, tok, workers=1).items()}


def test_ctrl_c_with_workers_stops_the_pool_and_resumes(tmp_path: Path, tiny_tasks: None) -> None:
    inputs, _ = _corpus(tmp_path)
    tok = load_tokenizer(TOKENIZER_PATH)
    clean = prepare(inputs, tmp_path / "clean", tok, shard_tokens=2000, workers=1)
    total = sum(s.num_tokens for s in clean.shards)
    seen = [0]

    def interrupt_halfway(nbytes: int, ntok: int) -> None:
        seen[0] += ntok
        if seen[0] > total // 2:
            raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        prepare(inputs, out, tok, shard_tokens=2000, progress=interrupt_halfway, workers=3)
    assert not mp.active_children()  # the pool was shut down, not left running
    assert not (out / "manifest.json").exists() and (out / "part-00001.json").exists()
    for name in (".part-00009.json.tmp4242", ".manifest.json.tmp4242"):  # what a kill inside atomic_write leaves
        (out / name).write_bytes(b"{half")
    again = prepare(inputs, out, tok, shard_tokens=2000, workers=2)
    assert again.workers == 2 and 0 < again.resumed_from < len(clean.shards)
    assert _files(out) == _files(tmp_path / "clean")


def _children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_sigkill_with_workers_then_resume(tmp_path: Path) -> None:
    """The real thing: `olmo prepare-data --workers 2` killed with SIGKILL mid-run, then run again."""
    corpus = tmp_path / "big.jsonl"
    write_jsonl(corpus, 12_000, seed=5)  # 3 MB: over MIN_POOL_BYTES, so the run uses worker processes
    tok: LoadedTokenizer = load_tokenizer(TOKENIZER_PATH)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "olmo", "prepare-data", "-i", str(corpus), "-o", str(out), "-t", "bundled",
           "--shard-size", "8K", "--workers", "2", "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (out / "part-00001.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    workers = _children_of(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # only the main process: its workers must notice and exit by themselves
    proc.wait()
    assert not (out / "manifest.json").exists(), "the run finished before it could be killed"
    assert len(workers) >= 2  # the forkserver and its workers
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"left behind: {[p.pid for p in alive]}"
    again = prepare(find_inputs([corpus]), out, tok, shard_tokens=8000, workers=2)
    assert again.resumed_from >= 1 and again.workers == 2
    prepare(find_inputs([corpus]), tmp_path / "clean", tok, shard_tokens=8000, workers=1)
    assert _files(out) == _files(tmp_path / "clean")
