"""`olmo import-hf`: turn a Hugging Face OLMo 2/3 folder into a checkpoint to fine-tune."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from olmo.cli import jsonout, summaries
from olmo.cli.common import JsonFlag, err, out
from olmo.errors import OlmoError
from olmo.fsutil import check_local
from olmo.outputs import overwrite_help
from olmo.terminal import inert, plain


@jsonout.command
def import_hf_cmd(
    hf_dir: Annotated[Path, typer.Argument(help="A Hugging Face OLMo 2/3 model folder (config.json + safetensors), "
                                           "e.g. from `hf download allenai/OLMo-2-0425-1B --local-dir DIR`.")],
    out_checkpoint: Annotated[Path, typer.Argument(help="Where to write the checkpoint (with recipe.yaml and "
                                                   "tokenizer.json).")],
    overwrite: Annotated[bool, typer.Option("--overwrite", help=overwrite_help("import-hf"))] = False,
    json_: JsonFlag = False,
) -> None:
    """Turn a Hugging Face OLMo 2/3 model into a checkpoint to fine-tune (`olmo train OUT/recipe.yaml`)."""
    from olmo.interop import hf
    check_local(hf_dir, "HF_DIR")
    check_local(out_checkpoint, "OUT_CHECKPOINT")
    if not hf_dir.is_dir():
        raise OlmoError(f"{hf_dir} is not a directory; give a Hugging Face model folder")
    from olmo.cli.progress import sized_bar

    with sized_bar("reading") as progress:
        path, model = hf.import_hf(hf_dir, out_checkpoint, overwrite, progress=progress)
    if json_:
        jsonout.emit(summaries.imported(path, model))
    tok = path / "tokenizer.json"
    if not tok.is_file():  # never point at a file this command did not write
        err.print(f"[yellow]warning:[/] {inert(str(hf_dir))} has no tokenizer.json, so none was copied; tokenize your "
                  "data with the model's own tokenizer.json and pass it to `olmo export-hf --tokenizer` later")
    commands = hf.fine_tune_commands(path, tok if tok.is_file() else None)
    out.print(f"wrote {plain(path)}: {model.num_params() / 1e6:,.1f}M parameters, {model.n_layers} layers; "
              "fine-tune with\n" + "\n".join("  " + plain(line) for line in commands), markup=False)


def register(app: typer.Typer) -> None:
    app.command("import-hf")(import_hf_cmd)
