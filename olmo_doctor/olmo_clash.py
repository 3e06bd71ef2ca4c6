"""A foreign top-level `olmo` package (allenai's `ai2-olmo`) shadowing the bundled trainer, named in one line.

The `olmo` console script starts here, in the `olmo_doctor` package that no other distribution ships: had it
started at `olmo.cli.main`, Python would import the other `olmo` and die with a traceback before any of our code
ran. Both CLIs use `clash_line` for the same message, made from the doctor's rule OD260 (its title, rendered
with the `olmo.module_origin` fact, and its first fix), so the wording lives in one place.
"""

from __future__ import annotations

import sys

# loaded before anything else: the words for a process that runs out of room must not need room to import
from olmo_doctor.live_faults import exit_on_limit, memory_error_of


def foreign_origin() -> str | None:
    """The distribution (or folder) `import olmo` would load when it is not this project's trainer."""
    from olmo_doctor.probes.python_env import olmo_origin

    origin = olmo_origin()
    return origin if origin not in (None, "olmo-doctor") else None


def clash_line(origin: str) -> str:
    """OD260's title and fix commands as one line."""
    try:
        from olmo_doctor.rules.engine import render
        from olmo_doctor.rules.model import find_rule

        rule = find_rule("OD260")
    except Exception:  # a broken rules file must not hide the clash itself
        rule = None
    if rule is None:
        return (f"`import olmo` loads {origin}, not the trainer bundled with olmo-doctor (OD260); "
                "run: pip uninstall -y ai2-olmo && ./install.sh")
    fix = rule.fixes[0].commands if rule.fixes else ()
    title = render(rule.title, {"olmo.module_origin": origin})
    return f"{title} ({rule.code}); run: {' && '.join(fix)}" if fix else f"{title} ({rule.code})"


def olmo_main() -> None:
    """The `olmo` console script: refuse in one line when `olmo` is someone else's, else run the real CLI; a
    memory limit too small for any of it (an import that cannot map its library) is named in one line."""
    exit_on_limit("olmo", _olmo_main)


def _olmo_main() -> None:
    origin = foreign_origin()
    if origin is not None:
        print(f"olmo: {clash_line(origin)}", file=sys.stderr)
        sys.exit(2)
    try:
        from olmo.cli.main import main
    except ImportError as e:  # ai2-olmo installed over our files in the same site-packages: same origin, broken
        if memory_error_of(e) is not None:  # a library that could not be mapped: exit_on_limit names the limit
            raise
        from importlib import metadata

        try:
            metadata.distribution("ai2-olmo")
            line = clash_line("ai2-olmo")
        except metadata.PackageNotFoundError:
            line = f"cannot import the bundled trainer ({type(e).__name__}: {e}); reinstall it with ./install.sh"
        print(f"olmo: {line}", file=sys.stderr)
        sys.exit(2)
    main()
