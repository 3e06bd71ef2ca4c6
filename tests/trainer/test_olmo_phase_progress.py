"""Every phase of a run that can take long shows progress (olmo/progress.py): the eval (a CPU run spent 68 s in it
after the last step with nothing on screen), checkpoint saves, the shard check before step 1, import-hf's write.
Counted, never timed: each phase's advances add up to its total exactly when it is done, and a phase predicted to
be long gets a start line in the log."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from olmo import checkpoint, progress
from olmo.config import TrainConfig
from olmo.train import train


class Recorder:
    """A `Phases` that keeps every phase: (label, total, [advances])."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, list[int]]] = []

    @contextlib.contextmanager
    def __call__(self, label: str, total: int) -> Iterator[Callable[[int], None]]:
        steps: list[int] = []
        self.seen.append((label, total, steps))
        yield steps.append

    def of(self, label: str) -> list[tuple[str, int, list[int]]]:
        return [p for p in self.seen if p[0] == label]


def test_eval_and_saves_count_their_work(tiny_data: Path, tmp_path: Path, micro: Callable[..., TrainConfig]) -> None:
    cfg = micro(tiny_data, tmp_path / "run", steps=4)
    cfg.eval_interval, cfg.save_interval, cfg.eval_batches, cfg.keep_last_n = 2, 2, 3, 0
    rec = Recorder()
    res = train(cfg, phases=rec)
    evals = rec.of("eval")
    assert len(evals) == 2  # steps 2 and 4
    for _, total, steps in evals:
        assert total == 3 and steps == [1, 1, 1]  # one advance per eval batch, reaching the total at the end
    saves = rec.of("saving")
    assert len(saves) == 2
    for (_, total, steps), step in zip(saves, (2, 4), strict=True):
        on_disk = progress.folder_bytes(tmp_path / "run" / "checkpoints" / f"step{step}")
        assert steps and sum(steps) == on_disk  # bytes actually on disk, counted as they appear
        assert 0 < total <= on_disk  # the tensors: the files hold them, plus metadata
    assert res.checkpoint == checkpoint.latest(tmp_path / "run")


def test_a_long_phase_gets_a_start_line_in_the_log(tiny_data: Path, tmp_path: Path,
                                                   micro: Callable[..., TrainConfig],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What counts as long is a prediction (the eval from the measured throughput, the save from its bytes); with
    the thresholds at zero every eval and save is long, and each says so before it starts."""
    monkeypatch.setattr(progress, "NOTE_SECONDS", 0.0)
    monkeypatch.setattr(progress, "NOTE_BYTES", 0)
    console = Console(record=True, width=200)
    cfg = micro(tiny_data, tmp_path / "run", steps=2)
    cfg.eval_interval, cfg.save_interval = 2, 2
    train(cfg, console=console)
    lines = console.export_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("eval step 2: ") and "batches (about " in ln)
    assert lines[start + 1].startswith("eval step 2: loss")  # the start line comes first, then the result
    saving = next(i for i, ln in enumerate(lines) if ln.startswith("saving checkpoint step 2 ("))
    assert lines[saving + 1].startswith("saved ")


def test_the_shard_check_before_step_one_counts_bytes(tiny_data: Path, tmp_path: Path,
                                                      micro: Callable[..., TrainConfig],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo.preflight import preflight

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing cached: every shard is read
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    rec = Recorder()
    preflight(micro(data, tmp_path / "run"), resume=False, phases=rec)
    (_, total, steps), = rec.of("checking shards")
    shards = sum(p.stat().st_size for p in data.glob("part-*.npy"))
    assert total == shards and sum(steps) == shards and len(steps) == len(list(data.glob("part-*.npy")))
    rec2 = Recorder()
    preflight(micro(data, tmp_path / "run"), resume=False, phases=rec2)
    assert rec2.of("checking shards") == []  # cached: nothing to read, no phase


def test_import_counts_what_it_reads_and_writes(tmp_path: Path, tiny_data: Path,
                                               micro: Callable[..., TrainConfig]) -> None:
    from olmo.interop.hf import export_hf, import_hf

    cfg = micro(tiny_data, tmp_path / "run", steps=2)
    train(cfg)
    export_hf(tmp_path / "run", tmp_path / "hf")
    calls: list[tuple[int, int]] = []
    import_hf(tmp_path / "hf", tmp_path / "ck", progress=lambda n, total: calls.append((n, total)))
    total = calls[-1][1]
    read = (tmp_path / "hf" / "model.safetensors").stat().st_size
    assert sum(n for n, _ in calls) >= total and total > read  # the write is counted after the read
    assert sum(n for n, _ in calls) == read + progress.folder_bytes(tmp_path / "ck")


def test_no_bars_in_a_pipe_or_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    from olmo.cli.progress import phase_bars

    with phase_bars()("eval", 4) as advance:
        for _ in range(4):
            advance(1)
    cap = capsys.readouterr()
    assert cap.out == cap.err == ""
