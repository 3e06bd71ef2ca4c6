"""The executor: run a BuildPlan's pip command (argv list, never a shell), show ninja progress, keep the log.

Thin on purpose: every decision is in the plan. This module streams the build output into a log file, turns
ninja's `[done/total]` lines into a progress bar with an ETA, samples the peak resident memory of the whole
process tree (pip -> setup.py -> ninja -> nvcc -> cicc/ptxas), and on failure asks `diagnose` what went wrong.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from olmo_common.bounded.files import CAPS, open_regular
from olmo_doctor.build.plan import BuildPlan
from olmo_doctor.isolation import safe_path

NINJA_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]\s*(.*)")
_SOURCE = re.compile(r"\s-c\s+(?:\S*/)?([\w.+-]+\.(?:cu|cpp|c))\b")


@dataclass
class BuildResult:
    returncode: int
    wall_s: float
    peak_rss_gb: float
    log_path: Path
    wheel: Path | None
    steps_done: int
    steps_total: int | None
    # (seconds since the build started, event): when ninja began and when each compile step finished, so a
    # slow build shows whether the time went to setup, one long unit, or packing
    timeline: list[tuple[float, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.wheel is not None


def parse_progress(lines: Iterable[str]) -> Iterator[tuple[int, int, str]]:
    """(done, total, what) for each ninja status line; `what` is the file being compiled when visible."""
    for line in lines:
        m = NINJA_STEP.match(line)
        if m:
            src = _SOURCE.search(m.group(3))
            yield int(m.group(1)), int(m.group(2)), src.group(1) if src else m.group(3)[:60]


class PeakRSS:
    """Samples the summed RSS of a process and its descendants in a background thread."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for proc in procs:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# pip / setuptools / torch.utils.cpp_extension lines that mark the build's phases (for the timeline)
_MILESTONES = (
    ("Preparing metadata (setup.py): finished", "metadata done"),
    ("setup.py bdist_wheel", "bdist_wheel starts"),
    ("running build_ext", "build_ext starts"),
    ("Emitting ninja build file", "ninja starts"),
    ("Created wheel for", "wheel packed"),
)


_COLUMNS = (
    SpinnerColumn(),
    TextColumn("[bold]{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TextColumn("{task.fields[unit]}"),
    TimeElapsedColumn(),
    TextColumn("ETA"),
    TimeRemainingColumn(),
)


@dataclass
class _Tracker:
    """What the build's output says so far: compile steps done of how many, and a timeline of milestones."""

    bar: Progress
    task: Any
    console: Console
    start: float = field(default_factory=time.monotonic)
    done: int = 0
    total: int | None = None
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def see(self, line: str) -> None:
        event = next((name for marker, name in _MILESTONES if marker in line), None)
        if event:
            self.timeline.append((round(time.monotonic() - self.start, 1), event))
        for step, steps, what in parse_progress([line]):
            self._step(step, steps, what)
        if "Building wheel for" in line and self.total is not None:
            self.bar.update(self.task, completed=self.total, unit="linking and packing")

    def _step(self, step: int, steps: int, what: str) -> None:
        self.done, self.total = step, steps
        elapsed = round(time.monotonic() - self.start, 1)
        self.timeline.append((elapsed, f"[{step}/{steps}] {what}"))
        # piped (not a terminal), ninja prints [n/N] when step n has finished
        self.bar.update(self.task, completed=step, total=steps, unit=what)
        if not self.console.is_terminal:  # logs and CI: one line per compile step instead of a bar
            self.console.print(f"[{step}/{steps}] {what} ({elapsed:.0f} s)", markup=False, highlight=False)


def _start(plan: BuildPlan) -> subprocess.Popen[str]:
    """The build's process, its output piped line by line."""
    # the fetched tree's setup.py runs by design; the tools it finds on PATH (nvcc, gcc, ninja) must not come
    # from the working folder
    env = {**os.environ, **plan.env}
    env["PATH"] = safe_path(env.get("PATH", os.defpath))
    return subprocess.Popen(
        plan.argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
        stdin=subprocess.DEVNULL,
    )


def run_plan(
    plan: BuildPlan,
    log_path: Path,
    console: Console | None = None,
    on_line: Callable[[str], None] | None = None,
) -> BuildResult:
    """Run the plan's argv with its env over ours; the log gets every line, the console a progress bar."""
    console = console or Console(stderr=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        log_path.open("w") as log,
        Progress(*_COLUMNS, console=console, transient=False, disable=not console.is_terminal) as bar,
    ):
        log.write(
            f"# olmo-doctor build-kernels: {plan.package} {plan.version}\n# argv: {plan.argv}\n# env: {plan.env}\n"
        )
        track = _Tracker(bar, bar.add_task(f"{plan.package} {plan.version}", total=None, unit="preparing"), console)
        proc = _start(plan)
        assert proc.stdout is not None
        with PeakRSS(proc.pid) as rss:
            for line in proc.stdout:
                log.write(line)
                if on_line:
                    on_line(line)
                track.see(line)
            rc = proc.wait()
        if rc == 0 and track.total is not None:
            bar.update(track.task, completed=track.total, unit="done")
        wall = time.monotonic() - track.start
        log.write(f"# returncode {rc}, wall {wall:.1f} s, peak RSS {rss.peak / 1e9:.2f} GB\n")
    wheels = sorted(Path(plan.wheel_dir).glob("*.whl"), key=lambda p: p.stat().st_mtime)
    wheel = wheels[-1] if rc == 0 and wheels else None
    return BuildResult(rc, wall, rss.peak / 1e9, log_path, wheel, track.done, track.total, track.timeline)


def explain_failure(log_path: Path) -> dict[str, Any]:
    """diagnose's verdict on a failed build log, or the first compiler error when diagnose is unavailable."""
    try:  # lazily: the build must not need diagnose to run
        from olmo_doctor.diagnose import diagnose, iter_chunks
    except ImportError:
        return {"source": "log", "title": "build failed", "message": first_error(log_path), "fixes": []}
    try:
        result = diagnose(iter_chunks(log_path))
    except Exception as e:  # diagnose failing must never hide the build failure itself
        return {"source": "error", "title": f"diagnose failed: {e}", "message": first_error(log_path), "fixes": []}
    # only a recognised cause speaks: lines every failed pip build prints (`egg_info did not run successfully`)
    # fit many causes, so alone they would name a wrong one; then the log's own error is the better answer
    if result.found and result.findings:
        top = result.findings[0]
        return {
            "source": "diagnose",
            "title": top.title,
            "message": top.message,
            "fixes": [c for f in top.fixes for c in f.commands],
        }
    return {"source": "log", "title": "build failed", "message": first_error(log_path), "fixes": []}


def first_error(log_path: Path, context: int = 6) -> str:
    """The first `FAILED:` block or error line: ninja's summary at the end only says 'subcommand failed'. Only
    the log's first CAPS["build log"] bytes are searched (a first error is near the start of what failed)."""
    try:
        with open_regular(log_path) as f:
            lines = f.read(CAPS["build log"]).decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    # ninja's failed step, then a Python exception (setup.py failing before any compile), then any error line
    exception = r"^\s*[A-Z]\w*(?:Error|Exception): "
    for pattern in (r"^FAILED: ", exception, r"\berror\b|Killed|fatal"):
        for i, line in enumerate(lines):
            if re.search(pattern, line, re.IGNORECASE if pattern.startswith(r"\berror") else 0):
                if pattern == exception:  # the traceback's last frame says where: show it with the exception
                    return "\n".join(lines[max(0, i - 3) : i + 1])
                return "\n".join(lines[i : i + context])
    return "\n".join(lines[-context:])
