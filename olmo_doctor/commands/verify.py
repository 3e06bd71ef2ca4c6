"""`olmo-doctor verify`: check this machine for training, then prove it trains with the embedded smoke run."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify(
        device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda when a GPU is visible).")] = None,
        steps: Annotated[int, typer.Option(help="Smoke-run steps.", min=2)] = 20,
        json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    ) -> None:
        """Run `check --scope train`, then a short training run of the embedded tiny model; one-line verdict."""
        from olmo_doctor.api import gather_facts, run_check

        facts = gather_facts()
        if device is None:
            device = "cuda" if (facts.get("gpu.count") or 0) and facts.get("torch.cuda_available") else "cpu"
        result = run_check(scope="train", plan_device=device, facts=facts)
        if not json_out:
            from olmo_doctor.commands.check_text import print_result

            print_result(result)
        if result.has_errors:
            verdict = f"✗ not verified: {len(result.errors)} problem(s) block training on {device}"
            _finish(json_out, verdict, result, None, 1)
        from olmo.errors import OlmoError
        from olmo.smoke import run_smoke
        from olmo_doctor.errors import UsageError

        try:
            smoke = run_smoke(device=device, steps=steps)
        except OlmoError as e:  # the trainer's own "bad input" type: the same one line, exit 2
            raise UsageError(str(e)) from None
        ok = smoke.loss_fell
        verdict = (f"{'✓ verified' if ok else '✗ not verified'}: {smoke.steps} steps on {smoke.device}, loss "
                   f"{smoke.losses[0]:.3f} -> {smoke.losses[-1]:.3f}, {smoke.tokens_per_s:,.0f} tokens/s")
        _finish(json_out, verdict, result, smoke, 0 if ok else 1)


def _finish(json_out: bool, verdict: str, result: object, smoke: object, code: int) -> None:
    if json_out:
        from dataclasses import asdict

        from olmo_doctor.render import to_json

        out = {"check": to_json(result), "smoke": asdict(smoke) if smoke is not None else None,  # type: ignore[arg-type, call-overload]
               "verdict": verdict, "ok": code == 0}
        typer.echo(json.dumps(out, default=str))
    else:
        typer.echo(verdict)
    raise typer.Exit(code)
