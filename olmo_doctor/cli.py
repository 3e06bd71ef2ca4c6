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


def _line(text: object) -> str:
    """An error message as one inert line: it often quotes what the user or a file gave (a path, a rule code), and
    a newline or ESC in that must neither break the one-line contract nor act on the terminal."""
    from olmo_doctor.shell import comment

    return comment(str(text))


def main() -> None:
    """Console entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    try:
        app()
    except UsageError as e:
        print(f"olmo-doctor: {_line(e)}", file=sys.stderr)
        sys.exit(2)
    except RuleError as e:  # a hand-edited rules file: name it, never a traceback
        print(f"olmo-doctor: broken rule file {_line(e)}; fix it or restore it with git", file=sys.stderr)
        sys.exit(2)
    except (ImportError, AttributeError):  # `olmo` may be another distribution's (OD260): name it, else re-raise
        from olmo_doctor.olmo_clash import clash_line, foreign_origin

        origin = foreign_origin()
        if origin is None:
            raise
        print(f"olmo-doctor: {clash_line(origin)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("olmo-doctor: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":  # python3 -m olmo_doctor.cli (bench/faults.sh on a machine without our venv)
    main()
