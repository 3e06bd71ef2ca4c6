"""`olmo train`: train from a recipe (after the doctor gate), print the resolved plan, or run the smoke test."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from olmo.cli import gate, jsonout, summaries
from olmo.cli.common import JsonFlag, err, out
from olmo.errors import OlmoError
from olmo.fsutil import check_local
from olmo.terminal import plain

if TYPE_CHECKING:
    from olmo.config import TrainConfig
    from olmo.preflight import Checked
    from olmo.progress import Phases


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
    _check_args(recipe, init_from, keep, device)
    if smoke:
        _refuse_with_smoke(recipe, resume, init_from, keep)
        _smoke(steps, device, skip_doctor, keep, set_ or [], json_)
    if keep is not None:
        raise OlmoError("--keep keeps a --smoke run; a recipe's run stays in its run_dir")
    if not recipe:
        raise OlmoError("give a recipe (e.g. `olmo train recipes/olmo2_60m.yaml`) or --smoke")
    from olmo.cli.progress import phase_bars
    from olmo.parallel import world_from_env

    cfg = _validated_recipe(recipe, set_ or [], device, init_from)
    bars = phase_bars()  # eval, checkpoint saves and shard checks, on stderr for a person watching
    checked = None
    if not dry_run:
        from olmo.preflight import preflight

        # bad data or run_dir fails here, before the doctor's probes; train() uses what it found, not a second look
        checked = preflight(cfg, resume, out.print, validated=True, phases=bars)
    world = world_from_env()
    if world.is_main:  # after the checks: a run refused for bad input says only why
        _warn_of_a_slow_step(cfg, world.world_size)
    if dry_run:
        from olmo.outputs import check_run_dir

        check_run_dir(Path(cfg.run_dir))  # a run_dir the real run would refuse is refused by the plan too
        _print_plan(cfg, json_)
        return
    gate.doctor_gate(gate.plan_device(cfg.device), skip_doctor)
    _train(cfg, resume, checked, bars, json_)


def _refuse_with_smoke(recipe: str | None, resume: bool, init_from: str | None, keep: Path | None) -> None:
    """OlmoError for what --smoke does not take: a recipe, --resume, --init-from, or a file as --keep."""
    if recipe or resume or init_from:
        raise OlmoError("--smoke trains the bundled tiny model; it takes no recipe, --resume or --init-from "
                        "(--set changes its config)")
    if keep is not None and keep.exists() and not keep.is_dir():
        raise OlmoError(f"--keep {keep} is a file; give a directory to keep the smoke run in")


def _smoke(steps: int, device: str | None, skip_doctor: bool, keep: Path | None, overrides: list[str],
           json_: bool) -> NoReturn:
    """`olmo train --smoke`: exit 0 when the bundled tiny model's loss fell, else 1."""
    gate.doctor_gate(gate.plan_device(device or "auto"), skip_doctor)
    from olmo.parallel import world_from_env
    from olmo.smoke import run_smoke

    result = run_smoke(device=device, steps=steps, out_dir=keep, console=out, overrides=overrides)
    if world_from_env().is_main:
        out.print(("[green]✓[/] " if result.loss_fell else "[red]✗[/] ") + result.verdict())
        if keep is not None:
            out.print(f"kept the run in {plain(keep)}: data/ (shards), run/ (metrics, checkpoint "
                      f"{plain(result.checkpoint)})",
                      markup=False)
    if json_:
        jsonout.emit(summaries.smoke(result, keep))
    raise typer.Exit(0 if result.loss_fell else 1)


def _validated_recipe(recipe: str, overrides: list[str], device: str | None, init_from: str | None) -> TrainConfig:
    """The recipe's config with the --set overrides, --device and --init-from, validated for this world size."""
    from olmo.config import validate
    from olmo.parallel import world_from_env
    from olmo.recipe import load_recipe

    cfg = load_recipe(recipe, overrides + ([f"device={device}"] if device else []))
    if init_from:
        cfg.init_from = init_from
    validate(cfg, world_from_env().world_size)
    return cfg


def _warn_of_a_slow_step(cfg: TrainConfig, world_size: int) -> None:
    from olmo.config_numbers import slow_step

    warning = slow_step(cfg, gate.plan_device(cfg.device), world_size)
    if warning:
        err.print(f"olmo: warning: {plain(warning)}", markup=False)


def _print_plan(cfg: TrainConfig, json_: bool) -> None:
    """`--dry-run`: the resolved config and the model's size, FLOPs and tokens per step."""
    from olmo.recipe import to_yaml
    from olmo.train import dry_run_summary

    summary = dry_run_summary(cfg)
    out.print(to_yaml(cfg), markup=False)
    out.print(f"{summary['parameters']:,} parameters ({summary['non_embedding_parameters']:,} without the "
              f"embedding), {summary['tokens_per_step']:,} tokens per step, {summary['flops_per_token']:,} FLOPs "
              "per token")
    if json_:
        jsonout.emit(summaries.planned(cfg, summary))


def _train(cfg: TrainConfig, resume: bool, checked: Checked | None, bars: Phases, json_: bool) -> None:
    """Train; a run that fails on its own numbers raises TrainingFailed, said by main's one error path."""
    from olmo.parallel import world_from_env
    from olmo.train import train

    res = train(cfg, resume=resume, console=out, checked=checked, phases=bars)
    ev = f", eval loss {res.eval_loss:.4f}" if res.eval_loss is not None else ""
    if world_from_env().is_main:
        out.print(f"done: step {res.step}{ev}, {res.tokens_per_s:,.0f} tokens/s; checkpoint {plain(res.checkpoint)}",
                  markup=False)
    if json_:
        jsonout.emit(summaries.trained(cfg, res))


def _check_args(recipe: str | None, init_from: str | None, keep: Path | None, device: str | None) -> None:
    """OlmoError for an empty --device, or a URL given as a recipe, --init-from or --keep."""
    if device is not None and not device.strip():
        raise OlmoError("--device is empty; give auto, cpu, cuda or cuda:N")
    for given, what in ((recipe, "RECIPE"), (init_from, "--init-from"), (keep, "--keep")):
        if given is not None:
            check_local(given, what)


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
