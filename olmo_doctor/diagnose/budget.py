"""The scan's work budget: signature checks cost at most WORK_PER_BYTE units (about 3 ns each: a character a
regex reads, or a Python step priced in them) per byte of log scanned so far, plus a start-up allowance, so
diagnose's time grows with the size of what it reads, never with how many near misses the log holds.

Without it, a log whose every line carries the required words of every signature (distinct lines, so nothing is
cached) costs one regex pass per signature per line, half a minute and more for 64 MB; so does a flood of short
distinct lines that each pass the prefilter. Real logs spend less: a 50 MB flash-attn build log 0.5 units per
byte, an NCCL_DEBUG=INFO training log about 7 (tests/security/test_diagnose_budget.py). The allowance grows with
the position in the log and a line can only use what the log up to its own end earned, so a flood of near misses
cannot spend what the lines after it earn. Lines the budget cannot pay for are passed over in one step (no Python
work per line) and counted; the output says so (`window.Cuts.unchecked`), never a silent miss. The last of them
(PASSED_KEEP bytes) are checked at the end from a reserve: the error a flood ends with is usually the last line.

    budget = Budget()
    if budget.spend(cost, upto=offset_of_line_end): ...   # else budget.skip(line_number)
"""

from __future__ import annotations

WORK_PER_BYTE = 12
# Python steps of the scan priced in units (measured): a gram found on a line or a signature tried on it
# (~1.5 us, on top of the characters its regex reads), a candidate line looked at (~5 us: found, cut out,
# decoded, its needles sorted).
STEP_COST = 512
LINE_COST = 2048
START = 32 << 20  # ~0.1 s of checks any log may spend before the per-byte rate applies
# At the end, the last lines passed over for want of budget (up to PASSED_KEEP bytes of them) are checked from
# this reserve: the error a flood of near misses ends with is usually the last line.
RESERVE = 8 << 20
PASSED_KEEP = 64 << 10


class Budget:
    """Units of work the checks of one log have spent, against what the bytes scanned so far earned."""

    def __init__(self) -> None:
        self.per_byte, self.start = WORK_PER_BYTE, START
        self.spent = 0
        self.skipped = 0  # lines some check was left out of
        self.first_skipped_line = 0
        self.last = 0  # the last line counted
        self.failures = 0  # checks that could not be paid

    def spend(self, cost: int, upto: int) -> bool:
        """Pay `cost` if the log up to byte `upto` (the end of the line being checked) earned it."""
        if self.spent + cost > self.start + self.per_byte * upto:
            return False
        self.spent += cost
        return True

    def earned_at(self, cost: int) -> int:
        """The first byte offset up to which the log has earned `cost` more than was spent."""
        return max(0, -(-(self.spent + cost - self.start) // self.per_byte))

    def unskip(self, lines: int) -> None:
        """`lines` of the lines counted as skipped were checked after all (from the reserve)."""
        self.skipped = max(0, self.skipped - lines)
        if not self.skipped:
            self.first_skipped_line = 0

    def skip(self, line: int, lines: int = 1) -> None:
        """Checks of `lines` lines from line `line` on left out for want of budget; a line is counted once (its
        gram walk and then its checks may both stop short)."""
        self.failures += 1
        if line <= self.last:
            line, lines = self.last + 1, lines - (self.last + 1 - line)
        if lines <= 0:
            return
        if not self.skipped:
            self.first_skipped_line = line
        self.skipped += lines
        self.last = line + lines - 1
