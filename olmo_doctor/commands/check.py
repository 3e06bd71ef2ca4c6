"""`olmo-doctor check`: probe this machine (or replay a report), judge it, print findings and env flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from olmo_doctor.errors import UsageError


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        json_out: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
        scope: Annotated[
            str, typer.Option(help="install (can we build kernels), train (can we train), or all.")
        ] = "all",
        from_report: Annotated[
            Path | None,
            # --report as well: diagnose names the same file that way
            typer.Option("--from-report", "--report",
                         help="Diagnose another machine from its collect_env output, a report, or a few pasted lines."),
        ] = None,
        deep: Annotated[bool, typer.Option(help="Also compile a 1-line .cu with the chosen host compiler.")] = False,
        device: Annotated[
            str | None, typer.Option(help="Device the planned training uses: cuda or cpu (default: cuda for train).")
        ] = None,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print info findings in full.")] = False,
        nccl: Annotated[
            bool, typer.Option(help="Also run an all-reduce over the visible GPUs and judge its bandwidth.")
        ] = False,
        fleet: Annotated[
            bool, typer.Option(help="Under torchrun/srun: one table for every node, all-reduces timed per node/link.")
        ] = False,
        fleet_facts_from: Annotated[
            Path | None, typer.Option(help="With --fleet: each node reads DIR/<node>.json instead of probing.")
        ] = None,
        fleet_timeout: Annotated[
            float | None, typer.Option(help="With --fleet: seconds before an all-reduce counts as hung (default 120).")
        ] = None,
        fleet_size_mb: Annotated[
            float | None, typer.Option(help="With --fleet: all-reduce size in MiB (default 256 on GPUs, 4 on CPUs).")
        ] = None,
    ) -> None:
        """Check this machine for building OLMo's kernels and training; exit 1 when something is broken."""
        if fleet:
            from olmo_doctor.fleet.cli import check_fleet

            if from_report is not None or nccl or deep:
                raise UsageError("--fleet probes every node itself; drop --from-report, --nccl and --deep")
            timeout = 120.0 if fleet_timeout is None else fleet_timeout
            raise typer.Exit(check_fleet(scope, fleet_facts_from, timeout, fleet_size_mb, json_out, device))
        if (fleet_facts_from, fleet_timeout, fleet_size_mb) != (None, None, None):
            raise UsageError("--fleet-facts-from, --fleet-timeout and --fleet-size-mb go with --fleet (a check of "
                             "every node under torchrun or srun); add --fleet or drop them")
        from olmo_doctor.api import run_check

        result = run_check(scope=scope, from_report=from_report, plan_device=device, deep=deep, nccl=nccl)
        if json_out:
            from olmo_doctor.render import dumps

            typer.echo(dumps(result))
        else:
            from olmo_doctor.commands.check_text import print_result

            print_result(result, verbose=verbose)
        raise typer.Exit(1 if result.has_errors else 0)
