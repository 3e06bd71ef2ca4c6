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


def plan_tests(names: list[str], ranks_of: dict[str, list[int]], world: int) -> list[list[tuple[Test, list[int]]]]:
    """Rounds of tests; the tests of one round use disjoint ranks and run at the same time."""
    rounds: list[list[tuple[Test, list[int]]]] = []
    if world >= 2:
        rounds.append([(Test("all", list(names), world), list(range(world)))])
    inside = [(Test("node", [n], len(ranks_of[n])), ranks_of[n]) for n in names if len(ranks_of[n]) >= 2]
    if inside:
        rounds.append(inside)
    if len(names) > 2:
        for pairs in pair_rounds(names):
            pairs = [(a, b) if names.index(a) < names.index(b) else (b, a) for a, b in pairs]
            rounds.append([(Test("pair", [a, b], len(ranks_of[a]) + len(ranks_of[b])), ranks_of[a] + ranks_of[b])
                           for a, b in sorted(pairs, key=lambda p: names.index(p[0]))])
    return rounds


def pair_rounds(names: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair (round-robin) for up to 8 nodes; beyond, two rounds of neighbours, so that each node is in two
    pairs with different partners: enough to tell a slow node (slow in both) from a slow link (slow in one)."""
    n = len(names)
    if n > 8:
        return [[(names[i], names[i + 1]) for i in range(start, n - 1, 2)] for start in (0, 1)] + [
            [(names[-1], names[0])]]
    ring: list[str | None] = [*names, *([None] if n % 2 else [])]  # None: this round's bye
    rounds = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        rounds.append([(a, b) for a, b in zip(ring[:half], reversed(ring[half:]), strict=True)
                       if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return rounds


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


class Watchdog:
    """Calls `fire` unless `stop` comes first; one per round of collectives."""

    def __init__(self, seconds: float, fire: Callable[[], None]):
        self.timer = threading.Timer(seconds, fire)
        self.timer.daemon = True
        self.timer.start()

    def stop(self) -> None:
        self.timer.cancel()


def run(scope: str, facts_from: Path | None, timeout: float, size_mb: float | None,
        emit: Callable[[FleetResult], None]) -> int:
    """Run this rank's part; rank 0 calls `emit` with the verdict. Returns the exit code for this process."""
    import torch
    import torch.distributed as dist

    place = world_mod.place()
    try:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=max(timeout, 60.0)))
    except Exception as e:  # the rendezvous itself failed: nothing else can run
        raise UsageError(f"cannot join the job's process group ({type(e).__name__}: {str(e)[:200]})") from None
    cuda = torch.cuda.is_available() and dist.is_nccl_available()
    who = [None] * place.world
    dist.all_gather_object(who, (place.node, cuda))
    names = list(dict.fromkeys(w[0] for w in who))  # type: ignore[index]
    ranks_of = {n: [r for r, w in enumerate(who) if w[0] == n] for n in names}  # type: ignore[index]
    leader = ranks_of[place.node][0] == place.rank
    payload: dict[str, Any] | None = None
    if leader:
        try:
            payload = {"facts": local_facts(place.node, facts_from)}
        except UsageError as e:
            payload = {"usage": str(e)}
        except Exception as e:  # a probe bug on one node must not silence the fleet
            payload = {"facts": {"probe.error": f"{type(e).__name__}: {e}"}}
    got: list[Any] = [None] * place.world if place.rank == 0 else []
    dist.gather_object(payload, got if place.rank == 0 else None, dst=0)
    nodes: dict[str, Facts] = {}
    if place.rank == 0:
        for node in names:
            item = got[ranks_of[node][0]] or {}
            if "usage" in item:
                problem = f"node {node}: {item['usage']}"
                dist.broadcast_object_list([problem], src=0)
                raise UsageError(problem)
            nodes[node] = item["facts"]
        dist.broadcast_object_list([None], src=0)
    else:
        problem_box: list[Any] = [None]
        dist.broadcast_object_list(problem_box, src=0)
        if problem_box[0]:
            dist.destroy_process_group()
            return 2
    all_all = all(w[1] for w in who)  # type: ignore[index]
    backend = "nccl" if all_all else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", place.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    size = size_mb or (256.0 if backend == "nccl" else 4.0)
    ranks = {n: len(r) for n, r in ranks_of.items()}
    done: list[Test] = []
    log: list[str] = []

    def finish(tests: list[Test]) -> FleetResult:
        result = judge(nodes, ranks, tests, scope=scope, source=f"{len(names)} nodes live",
                       log="\n".join(log))
        result.extra = {"backend": backend, "size_mb": size, "timeout_s": timeout}
        return result

    for round_ in plan_tests(names, ranks_of, place.world):
        for test, _ in round_:
            test.backend, test.size_mb = backend, size
        mine = next(((t, r) for t, r in round_ if place.rank in r), None)
        # NCCL's own watchdog tears the process down at its timeout: give it longer than ours, so rank 0 reports
        limit = datetime.timedelta(seconds=timeout + (0 if backend == "gloo" else 2 * GRACE_S))
        groups = [dist.new_group(r, backend=backend, timeout=limit) for _, r in round_]

        own: dict[str, Any] = {}

        def on_hang(round_: list[tuple[Test, list[int]]] = round_, own: dict[str, Any] = own,
                    own_test: Test | None = mine[0] if mine else None) -> None:
            if place.rank == 0:
                for test, _ in round_:
                    # rank 0's own test finished when `own` is filled: the hang is in the others
                    test.hang = not (own and test is own_test)
                emit(finish(done + [t for t, _ in round_]))
                sys.stdout.flush()
            os._exit(1)

        dog = Watchdog(timeout + (0 if place.rank == 0 else GRACE_S), on_hang)
        if mine is not None:
            group = groups[round_.index(mine)]
            try:
                seconds, correct = measure(group, device, size)
                own.update(seconds=seconds, correct=correct)
            except Exception as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                text = f"{type(e).__name__}: {first}"[:300]
                own.update(error=text, timeout="timed out" in text.lower() or "timeout" in text.lower())
        results: list[Any] = [None] * place.world if place.rank == 0 else []
        try:
            dist.gather_object(own, results if place.rank == 0 else None, dst=0)
        except Exception as e:  # a rank died (a crashed NCCL communicator takes its process down)
            if place.rank != 0:
                return 1  # rank 0 reports it
            dog.stop()
            for test, _ in round_:
                test.error = f"a rank of this round stopped: {type(e).__name__}: {str(e)[:200]}"
            log.append(str(e))
            result = finish(done + [t for t, _ in round_])
            emit(result)
            return result.exit_code
        dog.stop()
        if place.rank == 0:
            for test, members in round_:
                _record(test, [results[r] for r in members], log)
                done.append(test)
    code = 0
    if place.rank == 0:
        result = finish(done)
        emit(result)
        code = result.exit_code
    dist.barrier()  # nobody leaves before rank 0 has printed: a launcher stops the job when one rank exits
    dist.destroy_process_group()
    return code  # only rank 0 carries the verdict, so a launcher reports one failed rank, not all of them


def _record(test: Test, outcomes: list[dict[str, Any]], log: list[str]) -> None:
    """Fold the members' outcomes of one test into it: busbw from the slowest member (the collective ends there)."""
    errors = [o["error"] for o in outcomes if o.get("error")]
    if errors:
        test.hang = any(o.get("timeout") for o in outcomes)
        test.error = None if test.hang else errors[0]
        log.extend(errors)
        return
    seconds = max(o["seconds"] for o in outcomes)
    n = test.ranks
    algbw = test.size_mb * 2**20 / seconds / 1e9
    test.busbw_gbps = round(algbw * 2 * (n - 1) / n, 2) if n > 1 else round(algbw, 2)
    if not all(o["correct"] for o in outcomes):
        test.error = "the all-reduce returned wrong sums"
