"""What this process's own state says about an error it just hit: `olmo`'s error path asks here first.

A log read later cannot say which limits the failed process ran under; the process itself can. An error that says
the process could not map or allocate memory for itself (a library's segments, a thread's stack, a MemoryError:
loader_errors.memory_failure) is judged with the process's real resource limits as facts and the error as
`process.error`; a rule that fires only because of that error (OD270: the memory limit) names the fault. Without
such an error, or without a limit set, there is nothing to say here and the caller asks `diagnose` instead.

Kept light (no rich, no probes beyond the limits): it runs in a process that just ran out of room.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterator

from olmo_doctor.facts import Facts
from olmo_doctor.findings import Finding
from olmo_doctor.loader_errors import memory_failure

MAX_CHAIN = 8  # exceptions followed through __cause__ / __context__
NAMED = " -- olmo-doctor "  # what fault_line puts between the error and the code: a line already made


def chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it was raised from or while handling (a `raise X from None` keeps its context:
    a MemoryError turned into "not a tokenizer" by an `except Exception` is still seen)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_text(exc: BaseException) -> str:
    """Each exception of the chain as its `Type: message` line(s), innermost last."""
    return "\n".join("".join(traceback.format_exception_only(type(e), e)).strip() for e in chain(exc))


def memory_error_of(exc: BaseException) -> str | None:
    """The text of the first exception in the chain that is a memory failure of this process, or None."""
    for e in chain(exc):
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
        if isinstance(e, MemoryError) or memory_failure(text):
            # the line that says so (numpy wraps the loader's words in a page of advice)
            return next((line.strip() for line in text.splitlines() if memory_failure(line)), text or type(e).__name__)
    return None


def _live_facts() -> Facts:
    from olmo_doctor.probes.system import limits

    return {**limits(), "plan.device": None}


def limit_fault(exc: BaseException, facts: Facts | None = None) -> Finding | None:
    """The finding of the rule a memory failure in `exc`'s chain makes fire under this process's limits (`facts`
    stands in for them in tests), or None: not a memory failure, no limit set, or no rule names it."""
    error = memory_error_of(exc)
    if error is None:
        return None
    from olmo_doctor.rules.engine import fires, to_finding
    from olmo_doctor.rules.model import load_rules

    base = facts if facts is not None else _live_facts()
    with_error = {**base, "process.error": error}
    for rule in load_rules():
        if not rule.in_scope("train") or rule.severity_for("train") != "error":
            continue
        fired, extra, bound = fires(rule, with_error)
        if fired and not fires(rule, base)[0]:  # the error is the evidence, not the limit alone
            return to_finding(rule, bound, extra, scope="train")
    return None


def fault_line(said: str, finding: Finding) -> str:
    """`<what was raised> -- olmo-doctor CODE: title; first fix: ... (where to read more)`: one line."""
    first = next((c for fix in finding.fixes for c in fix.commands if "<" not in c), None)
    fix = f"; first fix: {first}" if first else ""
    return (f"{said.strip().splitlines()[-1][:300] if said.strip() else 'error'}{NAMED}{finding.code}: "
            f"{finding.title}{fix} (`olmo-doctor explain {finding.code}`; `olmo-doctor check --scope train` checks "
            "the whole machine)")


def limit_line(exc: BaseException) -> str | None:
    """The one line for a memory failure in `exc`'s chain that a memory limit of this process explains, or None.
    When the rules themselves cannot be loaded in the room left (they are files to parse), the limit is named
    without them (`bare_limit_line`). An error that already carries such a line (the gate's refusal, raised again
    through another handler) is that line, not a second one appended to it."""
    named = next((str(e) for e in chain(exc) if NAMED in str(e)), None)
    if named is not None:
        return named
    try:
        found = limit_fault(exc)
    except Exception:  # MemoryError, a thread or a library that could not be had: the limit, said plainly
        return bare_limit_line(exc)
    return fault_line(memory_error_of(exc) or type(exc).__name__, found) if found is not None else None


def _set_limit() -> tuple[str, int] | None:
    """(ulimit flag, bytes) of this process's address-space limit, else its data limit, when one is set."""
    import resource

    for name, flag in (("RLIMIT_AS", "-v"), ("RLIMIT_DATA", "-d")):
        soft = resource.getrlimit(getattr(resource, name))[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            return flag, soft
    return None


def bare_limit_line(exc: BaseException) -> str | None:
    """OD270's one line made with nothing but the standard library, for a process too short of room to load the
    rules: the error, the limit that is set, the fix. None when the error is no memory failure or no limit is set."""
    said, words = memory_error_of(exc), _limit_words()
    if said is None or words is None:
        return None
    return f"{said.strip().splitlines()[-1][:300] if said.strip() else type(exc).__name__}{words}"


def _limit_words() -> str | None:
    """What follows the error in `bare_limit_line`, or None when no memory limit is set."""
    limit = _set_limit()
    if limit is None:
        return None
    flag, size = limit
    shown = f"{size / (1 << 30):.1f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.0f} MiB"
    return (f"{NAMED}OD270: a memory limit (ulimit {flag} {shown}) left this process no room to run; first fix: "
            f"ulimit {flag} unlimited (`olmo-doctor explain OD270`)")


def exit_on_limit(prog: str, run: Callable[[], object]) -> None:
    """Run a command line's `run`; a failure a memory limit explains, wherever it escapes (an import before the
    command's own error path exists, or that error path running out of room itself), leaves as one line and exit
    2. Anything else goes on as it was."""
    words = _limit_words()  # made now, while there is room: at the end there may be none left to make them
    last_words = f"{prog}: MemoryError{words}\n".encode() if words else None
    try:
        run()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:
        try:
            line = limit_line(e)
        except Exception:  # no room even for that: a MemoryError under a limit is still the limit
            line = f"MemoryError{words}" if words and isinstance(e, MemoryError) else None
        if line is None:
            raise
        try:
            print(f"{prog}: {' '.join(line.split())}", file=sys.stderr)
        except MemoryError:  # not even room to print it: the words made at the start
            if last_words is None:
                raise
            os.write(2, last_words)
        sys.exit(2)
