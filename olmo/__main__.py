"""`python -m olmo ...` is the `olmo` command (useful where the console script is not on PATH). As there, a
memory limit too small for olmo's own imports is named in one line (olmo_doctor's exit_on_limit), not a traceback."""

from collections.abc import Callable


def _run() -> None:
    from olmo.cli.main import main

    main()


def _guard() -> Callable[[str, Callable[[], None]], None] | None:
    try:
        from olmo_doctor.live_faults import exit_on_limit
    except ImportError:  # olmo without its doctor runs unguarded (the gate says the doctor is missing)
        return None
    return exit_on_limit


guard = _guard()
if guard is not None:
    guard("olmo", _run)
else:
    _run()
