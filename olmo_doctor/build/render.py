"""Human-readable output for build-kernels: the plan (what will run and why) and findings that block it."""

from __future__ import annotations

import shlex

from rich.console import Console

from olmo_doctor.build.plan import BuildPlan
from olmo_doctor.findings import Finding
from olmo_doctor.render import plain
from olmo_doctor.shell import has_control, quote

_MARK = {"error": "[red]✗[/red]", "warning": "[yellow]![/yellow]", "info": "[blue]i[/blue]"}


def print_findings(console: Console, findings: list[Finding]) -> None:
    for f in findings:
        console.print(f"  {_MARK.get(f.severity, '-')} [bold]{f.code}[/bold] {plain(f.title)}")
        if f.message:
            console.print(f"      {plain(f.message)}", highlight=False, soft_wrap=True)
        for fix in f.fixes:
            for cmd in fix.commands:
                console.print(f"      [green]$[/green] {plain(cmd)}", highlight=False, soft_wrap=True)


def _heading(plan: BuildPlan) -> str:
    return (f"[bold]{plain(plan.package)} {plain(plan.version)}[/bold]"
            + (f"  (subset {plain(plan.subset)})" if plan.subset else ""))


def _target_line(plan: BuildPlan) -> str:
    target = ", ".join(f"{g}" for g in plan.gpus) or "given by --arch"
    return (f"  target      {target}: compute capability {', '.join(plan.compute_capabilities) or '-'}"
            f" -> archs {', '.join(plan.archs) or '-'}")


def _source_line(plan: BuildPlan) -> str:
    src = plan.source
    return f"  source      {src['location']}" + (f" (sha256 {src['sha256']})" if src.get("sha256") else "")


def _work_line(plan: BuildPlan) -> str:
    return (f"  work        {plan.translation_units} translation units"
            + (f" compiled as {plan.compile_jobs} jobs (the longest files split by kernel branch)"
               if plan.split_branches else "")
            + f"; MAX_JOBS {plan.sizing.reason}; nvcc "
            f"--threads {plan.nvcc_threads}")


def _memory_line(plan: BuildPlan) -> str:
    s = plan.sizing
    return (f"  memory      predicted peak {plan.predicted_peak_gb:g} GB (heaviest job {s.gb_per_job:g} GB)"
            + (f" of {s.memory_gb:g} GB available" if s.memory_gb is not None else ""))


def _command_line(plan: BuildPlan) -> str:
    env = " ".join(f"{k}={quote(v) if not has_control(v) else '<refused: control characters>'}"
                   for k, v in plan.env.items())
    return f"    {env} \\\n      {shlex.join(plan.argv)}"


# the findings a plan carries, each group under its heading (None: printed without one)
_FINDING_GROUPS = (
    ("blockers", "  [red]refused[/red]: fix these first"),
    ("warnings", None),
    ("installed_kernels", "  installed kernels (not blocking this build, which rebuilds the one it names):"),
)


def print_plan(console: Console, plan: BuildPlan) -> None:
    console.print(_heading(plan))
    # GPU names, paths and reasons are data: `[/]` in one is text
    console.print(_target_line(plan), highlight=False, markup=False)
    console.print(_source_line(plan), highlight=False, markup=False)
    console.print(_work_line(plan), highlight=False, markup=False, soft_wrap=True)
    console.print(_memory_line(plan), highlight=False, markup=False, soft_wrap=True)
    console.print(f"  cache key   {plan.cache_digest}", highlight=False, markup=False)
    console.print("  command", highlight=False)
    console.print(_command_line(plan), highlight=False, markup=False, soft_wrap=True)
    for attr, heading in _FINDING_GROUPS:
        findings = getattr(plan, attr)
        if findings and heading:
            console.print(heading)
        if findings:
            print_findings(console, findings)
