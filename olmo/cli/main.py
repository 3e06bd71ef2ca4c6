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

import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from olmo.cli import jsonout, summaries
from olmo.errors import ENVIRONMENT_ERRNOS, DamageFound, OlmoError, describe_os_error, one_line

if TYPE_CHECKING:
    from olmo.data.prepare import FileStats

app = typer.Typer(
    name="olmo",
    help="Train OLMo 2/3 models: tokenize documents into shards, validate shards, train (or smoke-test) a model, "
         "convert checkpoints to and from Hugging Face.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion: typer imports its completion modules anyway
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# --json on the commands a script runs (olmo/cli/jsonout.py): one object on stdout, made in olmo/cli/summaries.py
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (the summary) and nothing "
                                        "else there; logs go to stderr.")]
out = Console(highlight=False, soft_wrap=True)  # log lines stay whole in files and pipes
err = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_count(text: str) -> int:
    """'256M' -> 256_000_000; K, M, G (or B) are powers of 1000."""
    t = text.strip().upper().replace("_", "").replace(",", "")
    mult = {"K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except (ValueError, OverflowError):  # OverflowError: inf, or a number past float's range
        raise OlmoError(f"'{text}' is not a count; use e.g. 256M or 1000000") from None
    if n <= 0:
        raise OlmoError(f"the count must be positive (got {text})")
    return n


@app.command("prepare-data")
@jsonout.command
def prepare_data(
    inputs: Annotated[list[Path], typer.Option("--input", "-i", help=".jsonl (field 'text'), .txt (one document per "
                                               "file), optionally .gz; or directories of them. Repeatable.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for part-NNNNN.npy shards + manifest.")],
    tokenizer: Annotated[Path, typer.Option("--tokenizer", "-t", help="A Hugging Face tokenizer.json (or "
                                            "'bundled': the tiny tokenizer shipped with olmo).")],
    workers: Annotated[int | None, typer.Option(help="CPU cores to use: worker processes, one tokenizer thread "
                                                "each (default: all usable cores).", min=1)] = None,
    shard_size: Annotated[str, typer.Option(help="Tokens per shard, e.g. 256M; shards end on a document.")] = "256M",
    eos_token: Annotated[str | None, typer.Option(help="End-of-document token (default: auto-detect).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count documents and tokens per file; write nothing.")]
    = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace shards from a different run in --output.")]
    = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
    json_: JsonFlag = False,
) -> None:
    """Tokenize documents into headerless token shards that olmo and OLMo-core read (EOS after each document)."""
    from olmo.data import prepare as P
    workers = workers or P.pipe.usable_cpus()
    # Small inputs are encoded in this process, by the tokenizer's own thread pool: the same core budget.
    os.environ["RAYON_NUM_THREADS"] = str(workers)  # read when the tokenizer first encodes
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    from olmo.data.shards import dtype_for_vocab

    shard_tokens = parse_count(shard_size)
    if eos_token is not None and not eos_token.strip():
        raise OlmoError("--eos-token is empty; give the end-of-document token (e.g. '<|endoftext|>') or leave the "
                        "option out to detect it")
    files = P.find_inputs(inputs)
    tok = P.load_tokenizer(tokenizer, eos_token)
    if dry_run:
        stats = P.dry_run(files, tok, workers)
        code = _print_dry_run(files, stats, tok.vocab_size, shard_tokens)
        if json_:
            jsonout.emit(summaries.dry_run(files, stats, code == 0))
        raise typer.Exit(code)
    from olmo.cli.progress import bytes_bar

    with bytes_bar("tokenizing", sum(f.stat().st_size for f in files), tokens=True, quiet=quiet) as progress:
        res = P.prepare(files, output, tok, shard_tokens, overwrite, progress, workers)
    n_tok = sum(s.num_tokens for s in res.shards)
    n_docs = sum(s.num_docs for s in res.shards)
    if res.already_done:
        out.print(f"{escape(str(output))} is already prepared from these inputs: {len(res.shards)} shards, "
                  f"{n_tok:,} tokens")
        if json_:
            jsonout.emit(summaries.prepared(output, res, tok))
        return
    if res.resumed_from:
        out.print(f"resumed an interrupted run: kept {res.resumed_from} finished shard(s)")
    for path, st in res.stats.items():
        if st.bad:
            err.print(f"[yellow]warning:[/] {escape(str(path))}: skipped {st.bad} line(s) that are not JSON with a "
                      f"string 'text' (first: line {st.first_bad_line})")
        if st.empty:
            err.print(f"[yellow]warning:[/] {escape(str(path))}: skipped {st.empty} empty document(s)")
    rate = res.tokens_this_run / max(res.seconds, 1e-9)
    out.print(f"wrote {len(res.shards)} shard(s), {n_tok:,} tokens, {n_docs:,} documents to {escape(str(output))} "
              f"in {res.seconds:.1f}s ({rate:,.0f} tokens/s, {max(res.workers, 1)} worker process(es)); "
              f"dtype {dtype_for_vocab(tok.vocab_size)}, vocab {tok.vocab_size:,}, EOS id {tok.eos_id}")
    if json_:
        jsonout.emit(summaries.prepared(output, res, tok))


def _print_dry_run(files: list[Path], stats: dict[str, FileStats], vocab: int, shard_tokens: int) -> int:
    from rich.table import Table

    from olmo.data.shards import dtype_for_vocab

    table = Table("file", "documents", "tokens", "empty", "bad lines", "", box=None)
    flagged = 0
    for f in files:
        st = stats.get(str(f))
        docs, toks, empty, bad = (st.docs, st.tokens, st.empty, st.bad) if st else (0, 0, 0, 0)
        flag = "[red]no documents[/]" if docs == 0 else ("[red]unparseable lines[/]" if bad else "")
        flagged += bool(flag)
        table.add_row(escape(str(f)), f"{docs:,}", f"{toks:,}", str(empty), str(bad), flag)
    out.print(table)
    total = sum(s.tokens for s in stats.values())
    shards = max(1, -(-total // shard_tokens))
    out.print(f"total {sum(s.docs for s in stats.values()):,} documents, {total:,} tokens (EOS included) -> about "
              f"{shards} shard(s) of {dtype_for_vocab(vocab)}; nothing written (--dry-run)")
    if flagged:
        err.print(f"olmo: {flagged} input file(s) flagged: fix or remove them before preparing")
    return 1 if flagged else 0


@app.command("validate-shards")
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
    import numpy as np
    from rich.table import Table

    from olmo.cli.progress import bytes_bar
    from olmo.data.shards import DTYPES, ManifestError, shard_bytes, validate_dir

    if dtype is not None and dtype not in DTYPES:
        raise OlmoError(f"--dtype {dtype} is not one of: {', '.join(DTYPES)}")
    if dtype is not None and vocab_size is not None and vocab_size - 1 > np.iinfo(dtype).max:
        raise OlmoError(f"--vocab-size {vocab_size:,} does not fit in --dtype {dtype} (at most "
                        f"{np.iinfo(dtype).max + 1:,} ids); use uint32")
    if not directory.is_dir():
        raise OlmoError(f"{directory} is not a directory")
    try:
        with bytes_bar("verifying", shard_bytes(directory, vocab_size, dtype)) as progress:
            reports = validate_dir(directory, vocab_size, dtype, progress)
    except FileNotFoundError:
        raise OlmoError(f"{directory} has no manifest.json or part-*.json metadata; pass --vocab-size N (and "
                        "--dtype) to check bare .npy shards") from None
    except ManifestError as e:
        raise DamageFound(f"corrupt: {e}") from None
    table = Table("shard", "tokens", "documents", "max id", "status", box=None)
    for r in reports:
        status = "[green]ok[/]" if not r.problems else f"[red]{escape(r.problems[0].message)}[/]"
        docs = f"{r.num_docs:,}" if r.num_docs >= 0 else "-"
        table.add_row(escape(r.file), f"{r.num_tokens:,}", docs, str(r.max_id), status)
    out.print(table)
    problems = [p for r in reports for p in r.problems]
    if json_:
        jsonout.emit(summaries.validated(directory, reports))
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DamageFound(f"corrupt: {problems[0]}{more}")
    out.print(f"ok: {len(reports)} shard(s), {sum(r.num_tokens for r in reports):,} tokens")


def doctor_gate(plan_device: str, skip: bool) -> None:
    """Refuse to train on a machine `olmo-doctor check --scope train` finds errors on (exit 1). Under torchrun
    only the first process of each node checks (the machine is the same for all of them); if it refuses,
    torchrun stops the other processes."""
    if int(os.environ.get("LOCAL_RANK", 0)) != 0:
        return
    if skip:
        err.print("[bold red]WARNING: --skip-doctor: training without checking this machine. Failures from a broken "
                  "CUDA/driver/kernel stack will show up mid-run instead of here.[/]")
        return
    from olmo_doctor.api import run_check  # imported here: the doctor's probes are only needed for training
    from olmo_doctor.errors import UsageError

    try:
        result = run_check(scope="train", plan_device=plan_device)
    except UsageError as e:
        raise OlmoError(str(e)) from None
    except Exception as e:  # a bug in a probe is not evidence of a broken machine: say so and train
        err.print(f"[yellow]warning: olmo-doctor check could not run ({type(e).__name__}: {escape(str(e))}); "
                  "training without it[/]")
        return
    if not result.has_errors:
        return
    errors = [f for f in result.findings if f.severity == "error"]
    err.print(f"[bold red]olmo-doctor found {len(errors)} problem(s) that break training on "
              f"{escape(str(plan_device))}:[/]")
    for f in errors:
        err.print(f"  [red]✗[/] {escape(f.title)} [dim]({f.code})[/]")
        for fix in f.fixes:
            for cmd in fix.commands:
                err.print(f"      $ {cmd}", markup=False)
    err.print("olmo: refusing to train; fix the problems above (`olmo-doctor check` explains them) or pass "
              "--skip-doctor")
    raise typer.Exit(1)


def _plan_device(device: str) -> str:
    if device.startswith("cuda"):
        return "cuda"
    if device == "cpu":
        return "cpu"
    import torch

    # A GPU that torch cannot use is exactly what the doctor should look at, so nvidia-smi counts too.
    return "cuda" if torch.cuda.is_available() or shutil.which("nvidia-smi") else "cpu"


@app.command("train")
@jsonout.command
def train_cmd(
    recipe: Annotated[str | None, typer.Argument(help="A recipe: a .yaml file, a .py file[:function], or the "
                                                 "name of one in recipes/.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a config value, e.g. --set "
                                                   "optim.lr=3e-4 (repeatable). OLMo-core's --optim.lr=3e-4 and "
                                                   "torchtitan's --optim.lr 3e-4 mean the same.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from run_dir's latest checkpoint (start fresh "
                                         "if there is none).")]
    = False,
    smoke: Annotated[bool, typer.Option("--smoke", help="Train the bundled tiny model on the bundled corpus for a "
                                        "few steps; pass if the loss falls.")] = False,
    steps: Annotated[int, typer.Option(help="Steps for --smoke.", min=4)] = 20,
    device: Annotated[str | None, typer.Option(help="auto, cpu, cuda or cuda:N (overrides the recipe).")] = None,
    skip_doctor: Annotated[bool, typer.Option("--skip-doctor", help="Train even if olmo-doctor finds errors (not "
                                              "recommended).")]
    = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the resolved config and model size; do not "
                                          "train.")] = False,
    init_from: Annotated[str | None, typer.Option("--init-from", help="Start from the weights of this checkpoint or "
                                                  "run dir (e.g. made by `olmo import-hf`); fresh optimizer and "
                                                  "step 0.")] = None,
    keep: Annotated[Path | None, typer.Option("--keep", help="With --smoke: run in this directory and keep the data, "
                                              "run and checkpoint (default: a temp dir, deleted).")] = None,
    json_: JsonFlag = False,
) -> None:
    """Train a model from a recipe (checks the machine with olmo-doctor first), or run the smoke test."""
    if smoke:
        if recipe or resume or init_from:
            raise OlmoError("--smoke trains the bundled tiny model; it takes no recipe, --resume or --init-from "
                             "(--set changes its config)")
        if keep is not None and keep.exists() and not keep.is_dir():
            raise OlmoError(f"--keep {keep} is a file; give a directory to keep the smoke run in")
        doctor_gate(_plan_device(device or "auto"), skip_doctor)
        from olmo.parallel import world_from_env
        from olmo.smoke import run_smoke

        result = run_smoke(device=device, steps=steps, out_dir=keep, console=out, overrides=set_ or [])
        if world_from_env().is_main:
            out.print(("[green]✓[/] " if result.loss_fell else "[red]✗[/] ") + result.verdict())
            if keep is not None:
                out.print(f"kept the run in {keep}: data/ (shards), run/ (metrics, checkpoint {result.checkpoint})",
                          markup=False)
        if json_:
            jsonout.emit(summaries.smoke(result, keep))
        raise typer.Exit(0 if result.loss_fell else 1)
    if keep is not None:
        raise OlmoError("--keep keeps a --smoke run; a recipe's run stays in its run_dir")
    if not recipe:
        raise OlmoError("give a recipe (e.g. `olmo train recipes/olmo2_60m.yaml`) or --smoke")
    from olmo.config import validate
    from olmo.parallel import world_from_env
    from olmo.recipe import load_recipe, to_yaml

    cfg = load_recipe(recipe, (set_ or []) + ([f"device={device}"] if device else []))
    if init_from:
        cfg.init_from = init_from
    world = world_from_env()
    validate(cfg, world.world_size)
    if not dry_run:
        from olmo.preflight import preflight

        # bad data or run_dir fails here, before the doctor's probes; train() uses what it found, not a second look
        checked = preflight(cfg, resume, out.print, validated=True)
    if world.is_main:  # after the checks: a run refused for bad input says only why
        from olmo.config_numbers import slow_step

        warning = slow_step(cfg, _plan_device(cfg.device), world.world_size)
        if warning:
            err.print(f"olmo: warning: {warning}", markup=False)
    if dry_run:
        from olmo.train import describe

        d = describe(cfg)
        out.print(to_yaml(cfg), markup=False)
        out.print(f"{d['parameters']:,} parameters ({d['non_embedding_parameters']:,} without the embedding), "
                  f"{d['tokens_per_step']:,} tokens per step, {d['flops_per_token']:,} FLOPs per token")
        if json_:
            jsonout.emit(summaries.planned(cfg, d))
        return
    doctor_gate(_plan_device(cfg.device), skip_doctor)
    from olmo.train import TrainingFailed, train

    try:
        res = train(cfg, resume=resume, console=out, checked=checked)
    except TrainingFailed as e:
        err.print(f"olmo: {e}", markup=False)
        if json_:
            jsonout.emit({"ok": False, "error": str(e), "exit_code": 1})
        raise typer.Exit(1) from None
    ev = f", eval loss {res.eval_loss:.4f}" if res.eval_loss is not None else ""
    if world_from_env().is_main:
        out.print(f"done: step {res.step}{ev}, {res.tokens_per_s:,.0f} tokens/s; checkpoint {res.checkpoint}",
                  markup=False)
    if json_:
        jsonout.emit(summaries.trained(cfg, res))


@app.command("export-hf")
@jsonout.command
def export_hf_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint dir (runs/x/checkpoints/step1000) or a run dir "
                                               "(its latest checkpoint).")],
    out_dir: Annotated[Path, typer.Argument(help="Where to write the Hugging Face model folder.")],
    tokenizer: Annotated[Path | None, typer.Option(help="tokenizer.json to ship (default: the one the training "
                                                   "data was tokenized with, from its manifest).")] = None,
    dtype: Annotated[str, typer.Option(help="float32 (exact: the master weights) or bfloat16 (half the size).")]
    = "float32",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing OUT_DIR.")] = False,
    json_: JsonFlag = False,
) -> None:
    """Write a checkpoint as a Hugging Face model (Olmo2ForCausalLM, or Olmo3ForCausalLM with sliding windows)."""
    import torch

    from olmo.checkpoint import resolve
    from olmo.interop import hf

    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in dtypes:
        raise OlmoError(f"--dtype {dtype} is not one of: float32, bfloat16")
    try:
        path = resolve(checkpoint)
    except FileNotFoundError:
        raise OlmoError(f"{checkpoint} is not a checkpoint or a run dir with checkpoints") from None
    from olmo.cli.progress import sized_bar

    with sized_bar("writing") as progress:
        hf.export_hf(path, out_dir, tokenizer, dtypes[dtype], overwrite, progress=progress)
    conf = json.loads((out_dir / "config.json").read_text())
    out.print(f"wrote {conf['architectures'][0]} from {path} to {out_dir} ({dtype}); load it with "
              f"transformers.AutoModelForCausalLM.from_pretrained('{out_dir}')", markup=False)
    if json_:
        jsonout.emit(summaries.exported(path, out_dir, conf["architectures"][0], dtype))


@app.command("import-hf")
@jsonout.command
def import_hf_cmd(
    hf_dir: Annotated[Path, typer.Argument(help="A Hugging Face OLMo 2/3 model folder (config.json + safetensors), "
                                           "e.g. from `hf download allenai/OLMo-2-0425-1B --local-dir DIR`.")],
    out_checkpoint: Annotated[Path, typer.Argument(help="Where to write the checkpoint (with recipe.yaml and "
                                                   "tokenizer.json).")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing OUT_CHECKPOINT.")] = False,
    json_: JsonFlag = False,
) -> None:
    """Turn a Hugging Face OLMo 2/3 model into a checkpoint to fine-tune (`olmo train OUT/recipe.yaml`)."""
    from olmo.interop import hf
    if not hf_dir.is_dir():
        raise OlmoError(f"{hf_dir} is not a directory; give a Hugging Face model folder")
    from olmo.cli.progress import sized_bar

    with sized_bar("reading") as progress:
        path, model = hf.import_hf(hf_dir, out_checkpoint, overwrite, progress=progress)
    if json_:
        jsonout.emit(summaries.imported(path, model))
    tok = path / "tokenizer.json"
    if not tok.is_file():  # never point at a file this command did not write
        err.print(f"[yellow]warning:[/] {escape(str(hf_dir))} has no tokenizer.json, so none was copied; tokenize your "
                  "data with the model's own tokenizer.json and pass it to `olmo export-hf --tokenizer` later")
    out.print(f"wrote {path}: {model.num_params() / 1e6:,.1f}M parameters, {model.n_layers} layers; fine-tune with\n"
              f"  olmo prepare-data -i docs.jsonl -o data/ft -t {tok if tok.is_file() else 'MODEL/tokenizer.json'}\n"
              f"  olmo train {path / 'recipe.yaml'} --set data.paths=[data/ft]", markup=False)


REPORT_BUGS = "this is a bug in olmo; please report it with the traceback above and the command you ran"


def _train_options() -> set[str]:
    import typer.main

    group = typer.main.get_command(app)
    cmd = group.commands["train"]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def _fail(message: str, code: int) -> None:
    """One line on stderr (and the `--json` caller's object), then exit `code`."""
    print(f"olmo: {message}", file=sys.stderr)
    jsonout.emit_error(sys.argv, message, code)
    sys.exit(code)


def main() -> None:
    """Console entry point: an expected failure becomes one line on stderr (exit 2, or 1 where the command's job
    is to find damage), never a traceback; an unexpected one keeps its traceback and asks to be reported."""
    try:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError  # typer >= 0.24 vendors click
    except ImportError:  # pragma: no cover - older typer uses click itself
        from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[assignment]

    jsonout.reset()
    try:
        args = sys.argv[1:]
        if args[:1] == ["train"]:  # OLMo-core's `--a.b=c` and torchtitan's `--a.b c` overrides become --set
            from olmo.cli.overrides import rewrite

            args = ["train", *rewrite(args[1:], _train_options())]
        # standalone_mode=False: click's own usage errors come here too, to be said in one line
        code = app(args=args, prog_name="olmo", standalone_mode=False)
    except NoArgsIsHelpError:  # `olmo` alone: typer has printed the help
        sys.exit(2)
    except ClickException as e:
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        _fail(one_line(e.format_message()) + hint, e.exit_code)
    except OlmoError as e:
        _fail(one_line(str(e)), e.exit_code)
    except OSError as e:
        if e.errno not in ENVIRONMENT_ERRNOS:
            _internal_error()
        # a path the user gave that cannot be read or written (read-only mount, a file where a folder should
        # be, a full disk): the environment's fault, said in one line
        _fail(one_line(describe_os_error(e)), 2)
    except KeyboardInterrupt:
        print("olmo: interrupted", file=sys.stderr)
        sys.exit(130)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException:  # an Exception, or a library's BaseException (DCP's CheckpointException is one)
        _internal_error()
    code = code if isinstance(code, int) else 0
    if code:  # a refusal or failure that said why on stderr: a --json caller still gets an object
        jsonout.emit_error(sys.argv, "failed; stderr says why", code)
    sys.exit(code)


def _internal_error() -> None:
    import traceback

    traceback.print_exc()
    print(f"olmo: {REPORT_BUGS}", file=sys.stderr)
    sys.exit(1)
