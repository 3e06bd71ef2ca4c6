"""`olmo validate-shards`: recount, range-check and checksum a folder of token shards."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from olmo.cli import jsonout, summaries
from olmo.cli.common import JsonFlag, out
from olmo.errors import DamageFound, OlmoError
from olmo.fsutil import check_local
from olmo.terminal import inert

if TYPE_CHECKING:
    from olmo.data.shards import ShardReport


@jsonout.command
def validate_shards(
    directory: Annotated[Path, typer.Argument(help="A directory written by `olmo prepare-data` (or dolma).")],
    vocab_size: Annotated[int | None, typer.Option(help="Check ids against this vocab instead of the metadata's "
                                                   "(needed for shards without metadata).", min=1)] = None,
    dtype: Annotated[str | None, typer.Option(help="uint16 or uint32: how wide a token is in shards without "
                                              "metadata (default: the narrowest that holds --vocab-size); with "
                                              "metadata, it must match.")] = None,
    json_: JsonFlag = False,
) -> None:
    """Recount tokens and documents, check ids against the vocabulary, verify checksums; exit 1 on corruption."""
    _check_options(directory, vocab_size, dtype)
    reports = _validated(directory, vocab_size, dtype)
    _print_table(reports)
    problems = [p for r in reports for p in r.problems]
    if json_:
        jsonout.emit(summaries.validated(directory, reports))
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DamageFound(f"corrupt: {problems[0]}{more}")
    out.print(f"ok: {len(reports)} shard(s), {sum(r.num_tokens for r in reports):,} tokens")


def _check_options(directory: Path, vocab_size: int | None, dtype: str | None) -> None:
    import numpy as np

    from olmo.data.shards import DTYPES

    if dtype is not None and dtype not in DTYPES:
        raise OlmoError(f"--dtype {dtype} is not one of: {', '.join(DTYPES)}")
    if dtype is not None and vocab_size is not None and vocab_size - 1 > np.iinfo(dtype).max:
        raise OlmoError(f"--vocab-size {vocab_size:,} does not fit in --dtype {dtype} (at most "
                        f"{np.iinfo(dtype).max + 1:,} ids); use uint32")
    check_local(directory, "DIRECTORY")
    if not directory.is_dir():
        raise OlmoError(f"{directory} is not a directory")


def _validated(directory: Path, vocab_size: int | None, dtype: str | None) -> list[ShardReport]:
    """validate_dir under a progress bar; a folder with no metadata or a damaged manifest said in one line."""
    from olmo.cli.progress import bytes_bar
    from olmo.data.shards import ManifestError, shard_bytes, validate_dir

    try:
        with bytes_bar("verifying", shard_bytes(directory, vocab_size, dtype)) as progress:
            return validate_dir(directory, vocab_size, dtype, progress)
    except FileNotFoundError:
        raise OlmoError(f"{directory} has no manifest.json or part-*.json metadata; pass --vocab-size N (and "
                        "--dtype) to check bare .npy shards") from None
    except ManifestError as e:
        raise DamageFound(f"corrupt: {e}") from None


def _print_table(reports: list[ShardReport]) -> None:
    from rich.table import Table

    table = Table("shard", "tokens", "documents", "max id", "status", box=None)
    for r in reports:
        status = "[green]ok[/]" if not r.problems else f"[red]{inert(r.problems[0].message)}[/]"
        docs = f"{r.num_docs:,}" if r.num_docs >= 0 else "-"
        table.add_row(inert(r.file), f"{r.num_tokens:,}", docs, str(r.max_id), status)
    out.print(table)


def register(app: typer.Typer) -> None:
    app.command("validate-shards")(validate_shards)
