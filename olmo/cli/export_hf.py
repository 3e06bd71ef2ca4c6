"""`olmo export-hf`: write a checkpoint as a Hugging Face model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from olmo.cli import jsonout, summaries
from olmo.cli.common import JsonFlag, err, out
from olmo.errors import OlmoError
from olmo.fsutil import check_local
from olmo.outputs import overwrite_help
from olmo.terminal import plain
from olmo_common.bounded.data import load_json


@jsonout.command
def export_hf_cmd(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint dir (runs/x/checkpoints/step1000) or a run dir "
                                               "(its latest checkpoint).")],
    out_dir: Annotated[Path, typer.Argument(help="Where to write the Hugging Face model folder.")],
    tokenizer: Annotated[Path | None, typer.Option(help="tokenizer.json to ship (default: the one the training "
                                                   "data was tokenized with, from its manifest).")] = None,
    dtype: Annotated[str, typer.Option(help="float32 (exact: the master weights) or bfloat16 (half the size).")]
    = "float32",
    overwrite: Annotated[bool, typer.Option("--overwrite", help=overwrite_help("export-hf"))] = False,
    json_: JsonFlag = False,
) -> None:
    """Write a checkpoint as a Hugging Face model (Olmo2ForCausalLM, or Olmo3ForCausalLM with sliding windows)."""
    import torch

    from olmo.checkpoint import resolve
    from olmo.interop import hf

    for given, what in ((checkpoint, "CHECKPOINT"), (out_dir, "OUT_DIR"), (tokenizer, "--tokenizer")):
        if given is not None:
            check_local(given, what)
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in dtypes:
        raise OlmoError(f"--dtype {dtype} is not one of: float32, bfloat16")
    try:
        path = resolve(checkpoint)
    except FileNotFoundError:
        raise OlmoError(f"{checkpoint} is not a checkpoint or a run dir with checkpoints") from None
    from olmo.cli.progress import sized_bar
    from olmo.progress import NOTE_BYTES, folder_bytes

    size = folder_bytes(path)
    if size > NOTE_BYTES:  # reading the weights shows no bar: say what the wait is for
        err.print(f"exporting {plain(path)} ({size / 1e9:,.1f} GB) to {plain(out_dir)}: reading the weights",
                  markup=False)
    with sized_bar("writing") as progress:
        hf.export_hf(path, out_dir, tokenizer, dtypes[dtype], overwrite, progress=progress)
    conf = load_json(out_dir / "config.json", "model config")
    # the folder as a Python literal: pasted, the line loads that folder whatever quotes its name holds
    out.print(f"wrote {plain(conf['architectures'][0])} from {plain(path)} to {plain(out_dir)} ({dtype}); load it with "
              f"transformers.AutoModelForCausalLM.from_pretrained({str(out_dir)!r})", markup=False)
    if json_:
        jsonout.emit(summaries.exported(path, out_dir, conf["architectures"][0], dtype))


def register(app: typer.Typer) -> None:
    app.command("export-hf")(export_hf_cmd)
