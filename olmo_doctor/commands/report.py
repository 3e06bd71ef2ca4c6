"""`olmo-doctor report`: a shareable JSON report (facts + findings + env) with user names and home redacted.

`olmo-doctor check --from-report FILE` (on any machine) reads it back.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from olmo_doctor import __version__
from olmo_doctor.errors import UsageError


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        output: Annotated[Path | None, typer.Option(
            "-o", "--output", help="Write to FILE instead of stdout: a new file, or an earlier report of olmo-doctor's "
            "(nothing else is replaced); '-' is stdout.")] = None,
        deep: Annotated[bool, typer.Option(help="Include the deep probes.")] = False,
    ) -> None:
        """Write a shareable report of this machine (facts, findings, env), redacted."""
        from olmo_doctor.api import run_check
        from olmo_doctor.render import to_json
        from olmo_doctor.report import REPORT_MARK, redact

        if output is not None and str(output) == "-":  # the usual spelling of stdout, as --from-report - reads stdin
            output = None
        if output is not None:
            _check_replaceable(output, REPORT_MARK)
        result = run_check(scope="all", deep=deep)
        data = {REPORT_MARK: 1, "olmo_doctor_version": __version__, **to_json(result)}
        home = str(Path.home())
        homes = list(dict.fromkeys([home, os.path.realpath(home)]))  # /home/x and where it really lives
        # redacted as decoded strings, then serialised: the JSON escapes of non-ASCII names never hide one
        text = json.dumps(redact(json.loads(json.dumps(data, default=str)), homes, _user_names(), _host_names()),
                          indent=2) + "\n"
        if output is None:
            typer.echo(text, nl=False)
            return
        from olmo_common.atomic import atomic_write

        try:
            atomic_write(output, text.encode())
        except OSError as e:
            raise UsageError(f"cannot write {output}: {e.strerror or e}") from None
        typer.echo(f"wrote {output}; share it, or read it anywhere with: olmo-doctor check --from-report "
                   f"{shlex.quote(str(output))}")


def _check_replaceable(output: Path, mark: str) -> None:
    """UsageError unless `output` is new or an earlier report of ours: `-o` never replaces a file the user
    wrote (a typo'd `-o ~/.bashrc`), nor a symlink (the link would be replaced by a file, its target left stale),
    nor anything that is not a regular file."""
    from olmo_common.bounded.data import DataRefused, parse_json
    from olmo_common.bounded.files import read_text

    if not output.is_symlink() and not output.exists():
        return
    why = "it is a symlink" if output.is_symlink() else ("it is not a regular file" if not output.is_file() else "")
    if not why:
        try:
            ours = isinstance(data := parse_json(read_text(output, "report"), str(output)), dict) and mark in data
        except (OSError, ValueError, DataRefused):
            ours = False
        why = "" if ours else "it is not an olmo-doctor report"
    if why:
        raise UsageError(f"{output} already exists and {why}; report -o writes a new file or replaces its own "
                         "earlier report only: choose another file name")


def _user_names() -> list[str]:
    """Every name this user goes by: $USER/$LOGNAME (getpass), the passwd entry of the uid (they differ in
    containers and after `su`), and the person behind sudo, whose home the venv usually lives in."""
    names = []
    try:
        names.append(getpass.getuser())
    except (KeyError, OSError):
        pass
    try:
        import pwd

        names.append(pwd.getpwuid(os.getuid()).pw_name)
    except (ImportError, KeyError, OSError):
        pass
    names.append(os.environ.get("SUDO_USER", ""))
    return [n for n in dict.fromkeys(names) if n]


def _host_names() -> list[str]:
    """This machine's name, full and short (node12.cluster.org and node12)."""
    import socket

    try:
        host = socket.gethostname()
    except OSError:
        return []
    return [host, host.split(".")[0]] if host else []
