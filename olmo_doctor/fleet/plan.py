"""Which all-reduce tests a fleet runs, in rounds: all ranks, then every node's ranks at once, then node pairs.

The tests of one round use disjoint ranks and run at the same time, so a fleet of N nodes needs N-1 pair rounds
(every pair, round-robin) up to 8 nodes and three beyond (neighbours), never N*(N-1)/2 sequential tests.
"""

from __future__ import annotations

from olmo_doctor.fleet.links import Test

Round = list[tuple[Test, list[int]]]


def plan_tests(names: list[str], ranks_of: dict[str, list[int]], world: int) -> list[Round]:
    """Rounds of tests; the tests of one round use disjoint ranks and run at the same time."""
    rounds: list[Round] = []
    if world >= 2:
        rounds.append([(Test("all", list(names), world), list(range(world)))])
    inside = [(Test("node", [n], len(ranks_of[n])), ranks_of[n]) for n in names if len(ranks_of[n]) >= 2]
    if inside:
        rounds.append(inside)
    if len(names) > 2:
        rounds += [_pair_round(names, pairs, ranks_of) for pairs in pair_rounds(names)]
    return rounds


def _pair_round(names: list[str], pairs: list[tuple[str, str]], ranks_of: dict[str, list[int]]) -> Round:
    """One round of node pairs, each pair and the round in the order the nodes were named."""
    pairs = [(a, b) if names.index(a) < names.index(b) else (b, a) for a, b in pairs]
    return [(Test("pair", [a, b], len(ranks_of[a]) + len(ranks_of[b])), ranks_of[a] + ranks_of[b])
            for a, b in sorted(pairs, key=lambda p: names.index(p[0]))]


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
