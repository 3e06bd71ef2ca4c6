"""One module per command; each exposes `register(app)`. Listed here in the order `--help` shows them."""

from __future__ import annotations

from olmo_doctor.commands import (
    build_kernels,
    check,
    compare,
    diagnose,
    env,
    explain,
    facts_cmd,
    fix,
    report,
    rules,
    verify,
)

COMMAND_MODULES = [check, compare, diagnose, fix, build_kernels, env, verify, report, rules, explain, facts_cmd]
