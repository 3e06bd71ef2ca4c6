"""`olmo prepare-data`: tokenize documents into token shards that olmo and OLMo-core read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from olmo.cli import jsonout, summaries
from olmo.cli.common import JsonFlag, err, out, parse_count
from olmo.data.file_stats import FileStats, check_decoding
from olmo.data.text_decode import LEGACY
from olmo.errors import OlmoError
from olmo.fsutil import check_local
from olmo.outputs import overwrite_help
from olmo.terminal import inert

if TYPE_CHECKING:
    from olmo.data.prepare import InputOptions, LoadedTokenizer, PrepareResult

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

WORKERS_PER_CPU = 4  # more worker processes than this per usable CPU only add start-up and memory


@jsonout.command
def prepare_data(
    inputs: Annotated[list[Path], typer.Option("--input", "-i", help=".jsonl / .json.gz (one JSON object per line), "
                                               ".txt (one document per file), optionally .gz or .zst; .parquet; "
                                               "a saved Hugging Face datasets folder; or directories of them. "
                                               "Repeatable.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for part-NNNNN.npy shards + manifest.")],
    tokenizer: Annotated[Path, typer.Option("--tokenizer", "-t", help="A Hugging Face tokenizer.json (or "
                                            "'bundled': the tiny tokenizer shipped with olmo).")],
    workers: Annotated[int | None, typer.Option(help="CPU cores to use: worker processes, one tokenizer thread "
                                                "each (default: all usable cores).", min=1)] = None,
    shard_size: Annotated[str, typer.Option(help="Tokens per shard, e.g. 256M; shards end on a document.")] = "256M",
    eos_token: Annotated[str | None, typer.Option(help="End-of-document token (default: auto-detect).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count documents and tokens per file; write nothing.")]
    = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="For another job than the one --output holds (other "
                                            "inputs, tokenizer or shard size; the same job resumes without it). "
                                            + overwrite_help("prepare-data"))] = False,
    text_field: Annotated[str, typer.Option(help="The field (JSON) or column (Parquet, datasets) holding the text; "
                                            "a dotted path reaches into nested objects, e.g. meta.body.")] = "text",
    encoding: Annotated[str, typer.Option(help="Text encoding of the inputs: 'auto' (a byte-order mark, else "
                                          "UTF-8; a .txt that is plainly not UTF-8 is read as cp1252) or a codec "
                                          "name, e.g. latin-1, utf-16.")] = "auto",
    max_undecodable: Annotated[str, typer.Option(help="Refuse a file when more than this share of its bytes "
                                                 "cannot be decoded (each becomes U+FFFD), e.g. 0.1% or 0.001; "
                                                 "1 keeps every file.")] = "0.1%",
    max_doc_size: Annotated[str, typer.Option(help="Pass over (and count) a document (JSON line, .txt file, "
                                              "column value) larger than this, e.g. 32M; memory stays bounded "
                                              "by it.")] = "32M",
    max_decompressed: Annotated[str | None, typer.Option(help="Refuse a compressed file that decompresses to more "
                                                         "than this, e.g. 500G (default: 200x its size, at "
                                                         "least 1G).")] = None,
    keep_whitespace: Annotated[bool, typer.Option("--keep-whitespace", help="Tokenize each text as given; by "
                                                  "default its surrounding whitespace is stripped, as `dolma "
                                                  "tokens` does (olmo before 0.2 kept it).")] = False,
    bos_token: Annotated[str | None, typer.Option(help="Put this token before each document, e.g. '<s>' (default: "
                                                  "none, as OLMo's tokenizers).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    json_: JsonFlag = False,
) -> None:
    """Tokenize documents into headerless token shards that olmo and OLMo-core read (EOS after each document),
    with the same ids per document as OLMo's `dolma tokens`."""
    from olmo.cli.progress import bytes_bar
    from olmo.data import prepare as data_prep

    cpus = data_prep.pipe.usable_cpus()
    if workers is not None and workers > WORKERS_PER_CPU * cpus:
        # each worker is a process and each encoder a thread pool of that size: 100,000 of them hang the machine
        raise OlmoError(f"--workers {workers:,} is more than this machine can use: it has {cpus} usable CPU(s); give "
                        f"at most {WORKERS_PER_CPU * cpus}, or leave the option out for one per CPU")
    workers = workers or cpus
    # Small inputs are encoded in this process, by the tokenizer's own thread pool: the same core budget.
    os.environ["RAYON_NUM_THREADS"] = str(workers)  # read when the tokenizer first encodes
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    for given, what in ((output, "--output"), (tokenizer, "--tokenizer"), *((i, "--input") for i in inputs)):
        check_local(given, what)
    shard_tokens = parse_count(shard_size)
    if eos_token is not None and not eos_token.strip():
        raise OlmoError("--eos-token is empty; give the end-of-document token (e.g. '<|endoftext|>') or leave the "
                        "option out to detect it")
    options = input_options(text_field, encoding, max_undecodable, max_doc_size, max_decompressed, keep_whitespace)
    files = data_prep.find_inputs(inputs)
    tok = data_prep.load_tokenizer(tokenizer, eos_token, bos_token)
    total = sum(f.stat().st_size for f in files)
    if dry_run:
        with bytes_bar("counting", total, tokens=True, quiet=quiet) as progress:
            stats = data_prep.dry_run(files, tok, workers, options, progress)
        raise typer.Exit(_said_dry_run(files, stats, tok, shard_tokens, options, text_field, json_))
    with bytes_bar("tokenizing", total, tokens=True, quiet=quiet) as progress:
        res = data_prep.prepare(files, output, tok, shard_tokens, overwrite, progress, workers, options)
    _say_prepared(output, res, tok, options, text_field)
    if json_:
        jsonout.emit(summaries.prepared(output, res, tok))


def _said_dry_run(files: list[Path], stats: dict[str, FileStats], tok: LoadedTokenizer, shard_tokens: int,
                  options: InputOptions, text_field: str, json_: bool) -> int:
    """The dry run's table, what the real run would refuse (exit 2) or note, the --json object; its exit code."""
    code = _print_dry_run(files, stats, tok.vocab_size, shard_tokens)
    for f in files:  # what the real run would refuse, in the same words (exit 2)
        check_decoding(str(f), stats.get(str(f)), options.max_undecodable, options.read.encoding)
    for path, st in stats.items():  # the notes the real run would print
        _warn(path, st, text_field, options.read.encoding is None)
    if json_:
        jsonout.emit(summaries.dry_run(files, stats, code == 0))
    return code


def _say_prepared(output: Path, res: PrepareResult, tok: LoadedTokenizer, options: InputOptions,
                  text_field: str) -> None:
    """What a finished (or already finished) run wrote, with the per-file notes."""
    from olmo.data.shards import dtype_for_vocab

    n_tok = sum(s.num_tokens for s in res.shards)
    if res.already_done:
        out.print(f"{inert(str(output))} is already prepared from these inputs: {len(res.shards)} shards, "
                  f"{n_tok:,} tokens")
        return
    if res.resumed_from:
        out.print(f"resumed an interrupted run: kept {res.resumed_from} finished shard(s)")
    for path, st in res.stats.items():
        _warn(path, st, text_field, options.read.encoding is None)
    n_docs = sum(s.num_docs for s in res.shards)
    rate = res.tokens_this_run / max(res.seconds, 1e-9)
    out.print(f"wrote {len(res.shards)} shard(s), {n_tok:,} tokens, {n_docs:,} documents to {inert(str(output))} "
              f"in {res.seconds:.1f}s ({rate:,.0f} tokens/s, {max(res.workers, 1)} worker process(es)); "
              f"dtype {dtype_for_vocab(tok.vocab_size)}, vocab {tok.vocab_size:,}, EOS id {tok.eos_id}")


def parse_size(text: str, option: str) -> int:
    """'32M' -> 32 MiB: K, M, G, T are powers of 1024 (a trailing B or iB is allowed)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B").replace("_", "")
    unit = t[-1:] if t[-1:] in SIZE_UNITS else ""
    try:
        n = int(float(t[:len(t) - len(unit)]) * SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise OlmoError(f"{option} '{text}' is not a size; use e.g. 32M or 2G") from None
    if n < 1024:
        raise OlmoError(f"{option} must be at least 1K (got {text})")
    return n


def parse_share(text: str) -> float:
    """'0.1%' -> 0.001; '0.001' -> 0.001."""
    t = text.strip()
    try:
        share = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        share = -1.0
    if not 0 <= share <= 1:
        raise OlmoError(f"--max-undecodable '{text}' is not a share between 0 and 1 (or 0% and 100%)")
    return share


def parse_encoding(text: str) -> str | None:
    """None for 'auto', else Python's name for the codec (utf-8-sig is utf-8: BOMs are dropped anyway)."""
    if text.strip().lower() == "auto":
        return None
    from olmo.data.text_decode import check_codec

    try:
        name = check_codec(text.strip())
    except LookupError:
        raise OlmoError(f"--encoding '{text}' is not a text encoding Python knows; use e.g. utf-8, latin-1, "
                        "cp1252, utf-16, or auto") from None
    return "utf-8" if name == "utf-8-sig" else name


def input_options(text_field: str, encoding: str, max_undecodable: str, max_doc_size: str,
                  max_decompressed: str | None, keep_whitespace: bool) -> InputOptions:
    from olmo.data.prepare import InputOptions
    from olmo.data.readers import ReadOptions
    from olmo.data.tasks import Reading

    field = tuple(text_field.split("."))
    if not all(part.strip() for part in field):
        raise OlmoError(f"--text-field '{text_field}' is not a field name (e.g. text, or meta.body)")
    read = ReadOptions(field, parse_encoding(encoding), parse_size(max_doc_size, "--max-doc-size"),
                       parse_size(max_decompressed, "--max-decompressed") if max_decompressed else None)
    return InputOptions(read, Reading(field, strip=not keep_whitespace), parse_share(max_undecodable))


def _warn(path: str, st: FileStats, text_field: str, guessed: bool) -> None:
    """The per-file notes of a finished run: what was skipped or replaced, and a detected encoding."""
    where = f"[yellow]warning:[/] {inert(str(path))}:"
    if st.bad:
        rows = path.endswith((".parquet", ".arrow"))
        what = "row(s) whose" if rows else "line(s) that are not JSON objects with a string"
        err.print(f"{where} skipped {st.bad} {what} '{inert(text_field)}'{' is not text' if rows else ''} "
                  f"(first: {'row' if rows else 'line'} {st.first_bad_line}, {inert(st.first_bad_why)})")
    if st.empty:
        err.print(f"{where} skipped {st.empty} empty document(s)")
    if st.oversized:
        err.print(f"{where} skipped {st.oversized} document(s) larger than --max-doc-size")
    if st.undecodable:
        err.print(f"{where} {st.undecodable:,} byte(s) could not be decoded and became U+FFFD")
    if st.encoding == LEGACY and guessed:  # a BOM is not a guess; a file without one read as cp1252 is
        err.print(f"{where} not UTF-8; read as {st.encoding} (pass --encoding to choose)")


def _print_dry_run(files: list[Path], stats: dict[str, FileStats], vocab: int, shard_tokens: int) -> int:
    from rich.table import Table

    from olmo.data.shards import dtype_for_vocab

    table = Table("file", "documents", "tokens", "empty", "bad lines", "oversized", "undecodable", "encoding", "",
                  box=None)
    flagged = 0
    for f in files:
        st = stats.get(str(f)) or FileStats()
        flag = "[red]no documents[/]" if st.docs == 0 else ("[red]unparseable lines[/]" if st.bad else "")
        flagged += bool(flag)
        table.add_row(inert(str(f)), f"{st.docs:,}", f"{st.tokens:,}", str(st.empty), str(st.bad),
                      str(st.oversized), f"{st.undecodable:,}", st.encoding or "utf-8", flag)
    out.print(table)
    total = sum(s.tokens for s in stats.values())
    shards = max(1, -(-total // shard_tokens))
    out.print(f"total {sum(s.docs for s in stats.values()):,} documents, {total:,} tokens (EOS included) -> about "
              f"{shards} shard(s) of {dtype_for_vocab(vocab)}; nothing written (--dry-run)")
    if flagged:
        err.print(f"olmo: {flagged} input file(s) flagged: fix or remove them before preparing")
    return 1 if flagged else 0


def register(app: typer.Typer) -> None:
    app.command("prepare-data")(prepare_data)
