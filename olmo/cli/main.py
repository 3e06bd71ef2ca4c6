"""`olmo`: the bundled OLMo trainer's command line.

    olmo prepare-data --input docs.jsonl.gz --output data/tokens --tokenizer tokenizer.json
    olmo validate-shards data/tokens
    olmo train recipes/olmo2_60m.yaml --set data.paths=[data/tokens]
    olmo train recipes/olmo2_60m.yaml --model.n_layers=4 --optim.lr 3e-4   # OLMo-core / torchtitan spellings
    olmo train --smoke --keep runs/smoke --json     # keep the run; one JSON summary on stdout
    torchrun --nproc-per-node 8 -m olmo train recipes/olmo2_1b.yaml      # FSDP2 over 8 GPUs (parallel.dp)
    olmo export-hf runs/olmo/checkpoints/step1000 hf/my-olmo
    olmo import-hf path/to/OLMo-2-0425-1B ckpt/olmo2-1b && olmo train ckpt/olmo2-1b/recipe.yaml --set ...

Exit codes: 0 all clear, 1 problems found (corrupt shards, doctor errors, a failed run), 2 bad input or usage
(one line on stderr, `olmo: ...`, never a traceback, nothing half-written). Expected failures raise
olmo.errors.OlmoError and are caught once, in `main`; anything else is a bug in olmo and keeps its traceback,
followed by a line asking for a report (exit 1).
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from olmo.cli import export_hf, gate, import_hf, jsonout, prepare_data, train, validate_shards
from olmo.errors import ENVIRONMENT_ERRNOS, OlmoError, describe_os_error, one_line

app = typer.Typer(
    name="olmo",
    help="Train OLMo 2/3 models: tokenize documents into shards, validate shards, train (or smoke-test) a model, "
         "convert checkpoints to and from Hugging Face.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion: typer imports its completion modules anyway
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# one module per command, each with register(app); listed in the order `--help` shows them
for command in (prepare_data, validate_shards, train, export_hf, import_hf):
    command.register(app)


REPORT_BUGS = "this is a bug in olmo; please report it with the traceback above and the command you ran"


def _train_options() -> set[str]:
    import typer.main

    group = typer.main.get_command(app)
    cmd = group.commands["train"]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def _explain(e: BaseException) -> tuple[str, int] | None:
    """(message, exit code) for a failure that is the user's or the machine's, None for a bug in olmo."""
    limit = gate.limit_fault(e)  # out of memory under a memory limit, whatever a handler made of it: the limit
    if limit is not None:
        return limit, 2
    if isinstance(e, OlmoError):
        return str(e), e.exit_code
    if isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS:
        # a path the user gave that cannot be read or written (read-only mount, a file where a folder should
        # be, a full disk): the environment's fault, said in one line; the doctor may know why (a file-size
        # limit behind "File too large")
        fault = gate.environment_fault(e)
        return describe_os_error(e) + (f" ({fault.split(' -- ', 1)[-1]})" if fault else ""), 2
    return None


def main() -> None:
    """Console entry point: an expected failure becomes one line on stderr (exit 2, or 1 where the command's job
    is to find damage), never a traceback; an unexpected one keeps its traceback and asks to be reported. The
    one error path is olmo_common/cli_errors.py, shared with olmo-doctor."""
    from olmo_common import cli_errors

    jsonout.reset()
    gate.isolate_tool_path()
    args = sys.argv[1:]
    if args[:1] == ["train"]:  # OLMo-core's `--a.b=c` and torchtitan's `--a.b c` overrides become --set
        from olmo.cli.overrides import rewrite

        try:
            args = ["train", *rewrite(args[1:], _train_options())]
        except OlmoError as e:
            cli_errors.fail("olmo", str(e), e.exit_code, _emit_error)
    code = cli_errors.run(app, "olmo", args, _explain, on_fail=_emit_error, on_bug=_internal_error)
    if code:  # a refusal or failure that said why on stderr: a --json caller still gets an object
        jsonout.emit_error(sys.argv, "failed; stderr says why", code)
    sys.exit(code)


def _emit_error(message: str, code: int) -> None:
    jsonout.emit_error(sys.argv, one_line(message), code)


def _internal_error() -> NoReturn:
    import traceback

    from olmo_common import cli_errors

    exc = sys.exc_info()[1]
    fault = gate.environment_fault(exc) if exc is not None else None
    if fault is not None:  # the machine's fault, named by the doctor: one line, exit 2, not a bug report
        cli_errors.fail("olmo", fault, 2, _emit_error)
    traceback.print_exc()
    print(f"olmo: {REPORT_BUGS}", file=sys.stderr)
    sys.exit(1)
