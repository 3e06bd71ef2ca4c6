"""The one error path of both command lines, `olmo` and `olmo-doctor` (their `main()` both call `run`).

Whatever the user got wrong leaves as one line on stderr, `PROG: message`, and an exit code: 2 for bad input or
usage. That includes click's own usage errors (an unknown option or command, a missing argument, a value that is
not a number or not one of the choices), which typer otherwise prints as a 3-5 line box: here they are the same
one line, with a pointer to `--help`. Each CLI says which of its own exceptions are the user's (`explain`);
anything else is a bug and keeps its traceback (`on_bug`). Ctrl-C is "interrupted", exit 130.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

Explain = Callable[[BaseException], "tuple[str, int] | None"]  # (message, exit code) for the user's errors


def one_line(text: object) -> str:
    """`text` as one inert printable line: newlines and other control characters (ESC, from a file or a path) would
    split the line or act on the terminal; a byte of a path that is not UTF-8 (a lone surrogate) shows as \\xNN."""
    def show(c: str) -> str:
        if "\udc80" <= c <= "\udcff":
            return f"\\x{ord(c) - 0xDC00:02x}"
        if "\ud800" <= c <= "\udfff":
            return "?"
        return c if c.isprintable() else " "

    return " ".join("".join(map(show, part)) for part in str(text).split()).strip()


def usage_line(e: Any, prog: str) -> str:
    """A click usage error as one line, naming the command's `--help` (the program's when click names none)."""
    ctx = getattr(e, "ctx", None)
    return one_line(e.format_message()) + f" (see `{ctx.command_path if ctx is not None else prog} --help`)"


def fail(prog: str, message: str, code: int, on_fail: Callable[[str, int], None] | None = None) -> NoReturn:
    print(f"{prog}: {one_line(message)}", file=sys.stderr)
    if on_fail is not None:
        on_fail(message, code)
    sys.exit(code)


def run(app: Callable[..., Any], prog: str, args: list[str], explain: Explain,
        on_fail: Callable[[str, int], None] | None = None, on_bug: Callable[[], NoReturn] | None = None) -> int:
    """Run the typer `app` on `args`; return its exit code, or leave (sys.exit) with one line for any failure
    `explain` (or click) says is the user's. `on_fail(message, code)` hears each such failure (olmo's --json
    object); `on_bug()` handles anything else (default: re-raise)."""
    try:  # typer >= 0.24 vendors click
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
        from typer.exceptions import Abort
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click.exceptions import Abort, ClickException, NoArgsIsHelpError  # type: ignore[assignment]

    try:
        code = app(args=args, prog_name=prog, standalone_mode=False)
    except NoArgsIsHelpError:  # the command alone: the help was printed
        sys.exit(2)
    except ClickException as e:  # standalone_mode=False: click's usage errors come here, to be said in one line
        fail(prog, usage_line(e, _command(prog, args)), e.exit_code, on_fail)
    except (KeyboardInterrupt, Abort):
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # an Exception, or a library's BaseException (DCP's CheckpointException is one)
        said = explain(e)
        if said is not None:
            fail(prog, said[0], said[1], on_fail)
        if on_bug is None:
            raise
        on_bug()
    return code if isinstance(code, int) else 0


def _command(prog: str, args: list[str]) -> str:
    """The command a usage error is about, for when click names none: `prog sub`, or prog alone."""
    return f"{prog} {args[0]}" if args and not args[0].startswith("-") else prog
