"""The `olmo-doctor` command line: one typer app, one module per command under olmo_doctor/commands/.

Exit codes mean something everywhere: 0 all clear, 1 problems found, 2 bad input or usage.
"""

from __future__ import annotations

import sys

import typer

from olmo_doctor.commands import COMMAND_MODULES
from olmo_doctor.errors import UsageError
from olmo_doctor.rules.model import RuleError

app = typer.Typer(
    name="olmo-doctor",
    help="Check a machine for training OLMo, explain what is wrong and how to fix it, and build kernels for it.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion: typer imports its completion modules anyway
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

for module in COMMAND_MODULES:
    module.register(app)


def _explain(e: BaseException) -> tuple[str, int] | None:
    """(message, exit code) for the user's errors; None for a bug (it keeps its traceback)."""
    if isinstance(e, UsageError):
        return str(e), 2
    from olmo_doctor.live_faults import limit_line

    limit = limit_line(e)  # out of memory under a memory limit of this process: the limit, not a bug
    if limit is not None:
        return limit, 2
    if isinstance(e, RuleError):  # a hand-edited rules file: name it, never a traceback
        return f"broken rule file {e}; fix it or restore it with git", 2
    if isinstance(e, (ImportError, AttributeError)):  # `olmo` may be another distribution's (OD260): name it
        from olmo_doctor.olmo_clash import clash_line, foreign_origin

        origin = foreign_origin()
        return (clash_line(origin), 2) if origin is not None else None
    return None


def _tolerant_output() -> None:
    """Text we print is escaped where it comes from outside (render.plain), but a lone surrogate (a path byte
    that is not UTF-8) missed anywhere must print as \\udcNN, never end the command in a UnicodeEncodeError on a
    terminal whose encoding is strict (any UTF-8 locale but C/POSIX)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change its error handler now: leave it
                pass


def _refuse_urls(args: list[str]) -> None:
    """A URL given where a file goes (`diagnose https://.../build.log`, `report -o s3://b/r.json`) is one line,
    exit 2: no option of olmo-doctor takes a URL, and pathlib would make it a local `https:` folder."""
    from olmo_common.cli_errors import fail
    from olmo_common.local_paths import url_in

    url = url_in(args)
    if url is not None:
        fail("olmo-doctor", f"{url[:200]} is a URL; olmo-doctor reads and writes local files only: download it "
             "first (e.g. curl -fLo FILE URL) and give that file", 2)


def main() -> None:
    """Console entry point: bad input becomes one line on stderr and exit code 2, never a traceback, through the
    error path both command lines share (olmo_common/cli_errors.py)."""
    from olmo_common.cli_errors import run
    from olmo_doctor.isolation import sanitize_process_path
    from olmo_doctor.live_faults import exit_on_limit

    sanitize_process_path()  # no tool from the working folder, for us or any library we call (rule OD263 says so)
    _tolerant_output()
    _refuse_urls(sys.argv[1:])
    # a memory limit that leaves the error path itself no room is still named in one line
    exit_on_limit("olmo-doctor", lambda: sys.exit(run(app, "olmo-doctor", sys.argv[1:], _explain)))


if __name__ == "__main__":  # python3 -m olmo_doctor.cli (bench/faults.sh on a machine without our venv)
    main()
