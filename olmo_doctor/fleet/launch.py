"""`check --fleet` inside torchrun or srun: every node probes once, facts meet on rank 0 over gloo, then timed
all-reduces run over all ranks, inside each node and between node pairs.

Facts travel over gloo (TCP) so that the table prints even when NCCL itself is broken; the all-reduce tests use
NCCL on GPUs and gloo on CPUs, so a CPU machine exercises the same code. Each round of tests runs under a
watchdog: when a collective hangs, rank 0 prints what it has with the hung tests named and exits 1 (other ranks
wait a little longer, so that the launcher does not kill rank 0 before it has printed).
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts
from olmo_doctor.fleet import world as world_mod
from olmo_doctor.fleet.links import Test
from olmo_doctor.fleet.plan import Round, plan_tests
from olmo_doctor.fleet.verdict import FleetResult, judge

REPORT_ENV = "OLMO_DOCTOR_FLEET_REPORT"
GRACE_S = 30.0  # non-zero ranks outlive rank 0's watchdog by this much


def local_facts(node: str, facts_from: Path | None) -> Facts:
    """This node's facts: a report standing in for it (simulation), else the probes."""
    from olmo_doctor.report import load_report

    if os.environ.get(REPORT_ENV):
        return load_report(os.environ[REPORT_ENV])
    if facts_from is not None:
        for candidate in (facts_from / f"{node}.json", facts_from / node):
            if candidate.exists():
                return load_report(candidate)
        raise UsageError(f"{facts_from} has no report for node {node} ({node}.json)")
    from olmo_doctor.probes import collect

    return collect()


def measure(group: Any, device: Any, size_mb: float, iters: int = 5) -> tuple[float, bool]:
    """Seconds per all-reduce of size_mb on this group (after warm-up), and whether the sums were right."""
    import torch
    import torch.distributed as dist

    x = torch.ones(max(1, int(size_mb * 2**20) // 4), dtype=torch.float32, device=device)
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dist.all_reduce(x, group=group)
    sync()
    n = dist.get_world_size(group)
    correct = bool(x[0].item() == n and x[-1].item() == n)
    dist.all_reduce(x, group=group)
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x, group=group)
    sync()
    return (time.perf_counter() - start) / iters, correct


class Session:
    """One rank's view of the fleet check: who is where, the facts (rank 0), the tests done so far."""

    def __init__(self, place: world_mod.Place, scope: str, timeout: float, emit: Callable[[FleetResult], None],
                 plan_device: str | None = None):
        self.place, self.scope, self.timeout, self.emit = place, scope, timeout, emit
        self.plan_device = plan_device
        self.names: list[str] = []
        self.ranks_of: dict[str, list[int]] = {}
        self.nodes: dict[str, Facts] = {}
        self.backend, self.size = "gloo", 0.0
        self.done: list[Test] = []
        self.log: list[str] = []

    def result(self, tests: list[Test]) -> FleetResult:
        ranks = {n: len(r) for n, r in self.ranks_of.items()}
        out = judge(self.nodes, ranks, tests, scope=self.scope, source=f"{len(self.names)} nodes live",
                    log="\n".join(self.log), plan_device=self.plan_device)
        out.extra = {"backend": self.backend, "size_mb": self.size, "timeout_s": self.timeout}
        return out

    def _meet(self) -> None:
        """Who runs where, and the backend of the tests: NCCL only when every rank has a GPU and the job trains
        on GPUs (--device cpu tests what it will use: gloo)."""
        import torch
        import torch.distributed as dist

        who: list[Any] = [None] * self.place.world
        dist.all_gather_object(who, (self.place.node, torch.cuda.is_available() and dist.is_nccl_available()))
        self.names = list(dict.fromkeys(w[0] for w in who))
        self.ranks_of = {n: [r for r, w in enumerate(who) if w[0] == n] for n in self.names}
        self.backend = "nccl" if all(w[1] for w in who) and self.plan_device != "cpu" else "gloo"

    def _own_facts(self, facts_from: Path | None) -> dict[str, Any] | None:
        """What this rank sends rank 0: its node's facts (or why its input is bad) from the node's first rank."""
        if self.ranks_of[self.place.node][0] != self.place.rank:
            return None
        try:
            return {"facts": local_facts(self.place.node, facts_from)}
        except UsageError as e:
            return {"usage": str(e)}
        except Exception as e:  # a probe bug on one node must not silence the fleet
            return {"facts": {"probe.error": f"{type(e).__name__}: {e}"}}

    def _keep_facts(self, got: list[Any]) -> str | None:
        """Rank 0: keep each node's facts; the first node's bad input, if any."""
        items = {n: got[self.ranks_of[n][0]] or {} for n in self.names}
        self.nodes = {n: i.get("facts", {}) for n, i in items.items()}
        return next((f"node {n}: {i['usage']}" for n, i in items.items() if "usage" in i), None)

    def gather_facts(self, facts_from: Path | None) -> bool:
        """Each node's first rank probes (or reads its report); rank 0 collects. False when a node's input is bad
        (rank 0 raises it as a UsageError; the other ranks just stop)."""
        import torch.distributed as dist

        self._meet()
        payload = self._own_facts(facts_from)
        got: list[Any] = [None] * self.place.world if self.place.rank == 0 else []
        dist.gather_object(payload, got if self.place.rank == 0 else None, dst=0)
        problem: list[Any] = [self._keep_facts(got)] if self.place.rank == 0 else [None]
        dist.broadcast_object_list(problem, src=0)
        if problem[0] and self.place.rank == 0:
            raise UsageError(problem[0])
        return not problem[0]

    def _rank_died(self, round_: Round, e: Exception) -> int:
        """Rank 0, when a rank of the round stopped: the verdict so far, every test of the round failed."""
        for test, _ in round_:
            test.error = f"a rank of this round stopped: {type(e).__name__}: {str(e)[:200]}"
        self.log.append(str(e))
        verdict = self.result(self.done + [t for t, _ in round_])
        self.emit(verdict)
        return verdict.exit_code

    def run_round(self, round_: Round, device: Any) -> int | None:
        """Run this rank's test of the round under the watchdog; rank 0 records every test. An exit code when
        the fleet check must stop here (a rank died), else None."""
        import torch.distributed as dist

        rank = self.place.rank
        for test, _ in round_:
            test.backend, test.size_mb = self.backend, self.size
        mine = next(((t, r) for t, r in round_ if rank in r), None)
        # NCCL's own watchdog tears the process down at its timeout: give it longer than ours, so rank 0 reports
        limit = datetime.timedelta(seconds=self.timeout + (0 if self.backend == "gloo" else 2 * GRACE_S))
        groups = [dist.new_group(r, backend=self.backend, timeout=limit) for _, r in round_]
        own: dict[str, Any] = {}

        def on_hang() -> None:
            if rank == 0:
                for test, _ in round_:  # rank 0's own test is done once `own` is filled: the hang is elsewhere
                    test.hang = not (own and mine is not None and test is mine[0])
                self.emit(self.result(self.done + [t for t, _ in round_]))
                sys.stdout.flush()
            os._exit(1)

        dog = threading.Timer(self.timeout + (0 if rank == 0 else GRACE_S), on_hang)
        dog.daemon = True
        dog.start()
        if mine is not None:
            own.update(_own_test(groups[round_.index(mine)], device, self.size))
        results: list[Any] = [None] * self.place.world if rank == 0 else []
        try:
            dist.gather_object(own, results if rank == 0 else None, dst=0)
        except Exception as e:  # a rank died (a crashed NCCL communicator takes its process down)
            dog.cancel()
            return 1 if rank != 0 else self._rank_died(round_, e)  # rank 0 reports it
        dog.cancel()
        if rank == 0:
            for test, members in round_:
                _record(test, [results[r] for r in members], self.log)
                self.done.append(test)
        return None


def _own_test(group: Any, device: Any, size_mb: float) -> dict[str, Any]:
    """This rank's outcome of its test: seconds and correctness, or the error (and whether it timed out)."""
    try:
        seconds, correct = measure(group, device, size_mb)
        return {"seconds": seconds, "correct": correct}
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        text = f"{type(e).__name__}: {first}"[:300]
        return {"error": text, "timeout": "timed out" in text.lower() or "timeout" in text.lower()}


def run(scope: str, facts_from: Path | None, timeout: float, size_mb: float | None,
        emit: Callable[[FleetResult], None], plan_device: str | None = None) -> int:
    """Run this rank's part; rank 0 calls `emit` with the verdict. Returns the exit code for this process."""
    import torch.distributed as dist

    place = world_mod.place()
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=max(timeout, 60.0)))
    except Exception as e:  # the rendezvous itself failed: nothing else can run
        raise UsageError(f"cannot join the job's process group ({type(e).__name__}: {str(e)[:200]})") from None
    try:
        return _run_joined(Session(place, scope, timeout, emit, plan_device), place, facts_from, size_mb)
    finally:
        # left by every path, an error too: a gloo group alive at interpreter exit aborts the process (SIGABRT,
        # "terminate called without an active exception") after the one line the error already printed
        if dist.is_initialized():
            dist.destroy_process_group()


def _run_joined(session: Session, place: world_mod.Place, facts_from: Path | None, size_mb: float | None) -> int:
    """This rank's part once it has joined the group; the exit code for this process."""
    import torch
    import torch.distributed as dist

    if not session.gather_facts(facts_from):
        return 2
    device = torch.device("cpu")
    if session.backend == "nccl":
        device = torch.device("cuda", place.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    session.size = size_mb or (256.0 if session.backend == "nccl" else 4.0)
    for round_ in plan_tests(session.names, session.ranks_of, place.world):
        stop = session.run_round(round_, device)
        if stop is not None:
            return stop
    code = 0
    if place.rank == 0:
        verdict = session.result(session.done)
        session.emit(verdict)
        code = verdict.exit_code
    dist.barrier()  # nobody leaves before rank 0 has printed: a launcher stops the job when one rank exits
    return code  # only rank 0 carries the verdict, so a launcher reports one failed rank, not all of them


def _busbw(size_mb: float, seconds: float, n: int) -> float:
    """An all-reduce's bus bandwidth in GB/s: what each link carried, 2(n-1)/n times the data over the time."""
    algbw = size_mb * 2**20 / seconds / 1e9
    return round(algbw * 2 * (n - 1) / n, 2) if n > 1 else round(algbw, 2)


def _record(test: Test, outcomes: list[dict[str, Any]], log: list[str]) -> None:
    """Fold the members' outcomes of one test into it: busbw from the slowest member (the collective ends there)."""
    errors = [o["error"] for o in outcomes if o.get("error")]
    if errors:
        test.hang = any(o.get("timeout") for o in outcomes)
        test.error = None if test.hang else errors[0]
        log.extend(errors)
        return
    test.busbw_gbps = _busbw(test.size_mb, max(o["seconds"] for o in outcomes), test.ranks)
    if not all(o["correct"] for o in outcomes):
        test.error = "the all-reduce returned wrong sums"
