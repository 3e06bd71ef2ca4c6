"""One module per command; each exposes `register(app)`. Listed here in the order `--help` shows them."""

from __future__ import annotations

from olmo_doctor.commands import (
    build_kernels,
    check,
    diagnose,
    env,
    explain,
    facts_cmd,
    fix,
    report,
    rules,
    verify,
)

COMMAND_MODULES = [check, diagnose, fix, build_kernels, env, verify, report, rules, explain, facts_cmd]
