"""One verdict for every node of a multi-node job: `check --fleet` (live, under torchrun or srun) and `compare`
(from saved reports).

`table` lines up the facts that must agree across nodes and marks the odd ones; `links` judges timed all-reduce
tests against the links' expected bandwidth and against each other; `verdict` turns both into `fleet.*` facts that
the rules in known_issues/ judge, like any machine's facts; `output` prints the table; `launch` is the
torch.distributed part (gather over gloo, the timed all-reduces, the hang watchdog).
"""
