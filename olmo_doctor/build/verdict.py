"""One answer to "can the kernels be built here?", for `check --scope install` and `build-kernels` alike.

`build-kernels` plans each package it is asked for and refuses on the plan's blockers; `check --scope install`
plans the packages `build-kernels --package all` builds (flash-attn and xformers), with the same default request,
and reports the same build findings (BK codes). Both judge the same facts with the same install-scope rules, so
the two commands never disagree about the same build.

A finding about a kernel that is already installed (it does not load, it was built for another torch) is shown
by both but never refuses a build: building the kernel is its fix, and another kernel's state does not affect it.
"""

from __future__ import annotations

from collections.abc import Iterable

from olmo_doctor.build.plan import BuildPlan, BuildRequest, plan_build
from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.facts import Facts
from olmo_doctor.findings import Finding

DEFAULT_PACKAGES = ("flash-attn", "xformers")  # what `build-kernels --package all` builds


def default_plans(facts: Facts, findings: list[Finding], packages: Iterable[str] = DEFAULT_PACKAGES
                  ) -> list[BuildPlan]:
    """The plans `build-kernels --package all --dry-run` makes for these facts (no --jobs, --arch, --subset)."""
    out = []
    for package in packages:
        recipe = find_recipe(package)
        request = BuildRequest(package=recipe.package, python=str(facts.get("python.executable") or "python3"))
        out.append(plan_build(facts, recipe, request, findings))
    return out


def build_findings(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """The build rules' findings (BK codes) of those plans, each (code, title) once: what `check --scope
    install` adds to the install-scope rules' own findings."""
    seen: set[tuple[str, str]] = set()
    out = []
    for plan in default_plans(facts, findings):
        for finding in plan.blockers + plan.warnings:
            if finding.code.startswith("BK") and (finding.code, finding.title) not in seen:
                seen.add((finding.code, finding.title))
                out.append(finding)
    return out
