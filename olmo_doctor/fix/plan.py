"""The fix plan: exactly what `olmo-doctor fix --apply` will do, computed without changing anything.

Pure: a CheckResult (findings with their rendered fix actions, the recommended env), what the target environment
has installed and the current env file text go in; a FixPlan comes out. The dry run prints it, `--json` dumps it,
and the executor runs its `apply` items verbatim, so what the dry run shows is what runs.

Grading follows ruff: `safe` fixes run with --apply, `unsafe` ones only with --unsafe-fixes, `manual` ones are
printed. Every automatic fix of a finding that the flags allow runs: rules write the steps of one repair as
separate fixes (OD205 installs wheel, packaging and setuptools; OD251 uninstalls a broken ninja, then installs it)
and alternatives as manual fixes ("Or upgrade the driver"). Items run in a fixed order (env file, uninstalls,
installs, torch, kernels), and an install counts as already done only if no planned uninstall removes it first.
pip changes to an interpreter that is not a venv or conda env are held back: that is the user's system Python.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from importlib.util import find_spec
from typing import Any

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from olmo_doctor.errors import UsageError
from olmo_doctor.findings import Finding, Fix
from olmo_doctor.fix import envfile
from olmo_doctor.fix.pyenv import PyEnv, pip_argv
from olmo_doctor.isolation import python_argv
from olmo_doctor.rules.actions import (
    ENV_ACTIONS,
    Action,
    ActionBadValue,
    ActionError,
    ActionUnresolved,
    EnvSet,
    PipInstall,
    PipUninstall,
    RebuildKernel,
    ReinstallTorch,
    Ulimit,
    parse_actions,
    touches_compiled,
)
from olmo_doctor.shell import has_control

ENV_CODE = "env"  # --only env selects the recommended exports
OP_ORDER = {"write_env_file": 0, "pip_uninstall": 1, "pip_install": 2, "reinstall_torch": 3, "rebuild_kernel": 4}
STATUSES = ("apply", "done", "needs_unsafe", "needs_venv", "blocked", "manual")


@dataclass
class PlanItem:
    """One thing the fix run does (or would do, or only prints)."""

    id: str
    op: str  # write_env_file | pip_install | pip_uninstall | reinstall_torch | rebuild_kernel | manual
    codes: list[str]
    title: str
    applicability: str
    status: str  # one of STATUSES; only "apply" items run
    description: str
    reason: str = ""  # why it does not run (done, held back, blocked)
    argv: list[str] | None = None  # the exact command --apply runs
    path: str | None = None  # the file --apply writes, relative to the project
    content: str | None = None  # that file's new text
    diff: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # what a user would type (from the rule)
    backup: list[str] = field(default_factory=list)  # distributions saved as wheels before running
    # the env-file statements this run writes itself: journaled with the plan, they are the only lines of
    # .olmo-doctor/env.sh a re-check may apply (fix/recheck.py); everything else in the file is data
    own_lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, [], "")}


@dataclass
class FixPlan:
    project: str
    python: str | None
    env_kind: str | None  # venv | conda | system; None when planning for a report
    unsafe: bool
    items: list[PlanItem]
    findings: list[dict[str, str]]
    only: list[str] | None = None
    from_report: str | None = None

    @property
    def to_run(self) -> list[PlanItem]:
        return [i for i in self.items if i.status == "apply"]

    def count(self, status: str) -> int:
        return sum(i.status == status for i in self.items)

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project, "python": self.python, "environment": self.env_kind,
            "unsafe_fixes": self.unsafe, "only": self.only, "from_report": self.from_report,
            "findings": self.findings, "items": [i.to_json() for i in self.items],
            "summary": {s: self.count(s) for s in STATUSES if self.count(s)},
        }


def _allowed(fix: Fix, unsafe: bool) -> bool:
    return fix.automatic and (fix.applicability == "safe" or unsafe)


def _hard_limit(action: Ulimit, facts: dict[str, Any]) -> object:
    """The hard limit in `ulimit`'s units (-1: unlimited); whatever the facts hold when it is not a number."""
    hard = facts.get(f"ulimit.{action.resource}.hard")
    if isinstance(hard, int) and hard != -1 and action.resource == "memlock":
        hard //= 1024  # the fact is in bytes, `ulimit -l` counts KiB
    return hard


def _ulimit_comment(action: Ulimit, facts: dict[str, Any]) -> tuple[Ulimit, str]:
    """Cap a numeric target at the hard limit (raising that needs root) and say what 'hard' means here."""
    hard = _hard_limit(action, facts)
    if action.value == "hard":
        return action, f" (hard limit now {'unlimited' if hard == -1 else hard})" if isinstance(hard, int) else ""
    if isinstance(hard, int) and hard != -1 and int(action.value) > hard:
        return Ulimit(action.resource, str(hard)), f" (capped at the hard limit {hard}; more needs root)"
    return action, ""


def _install_satisfied(action: PipInstall, env: PyEnv) -> str | None:
    req = Requirement(action.requirement)
    if req.marker is not None and not req.marker.evaluate():
        return f"'{action.requirement}' does not apply to this Python"
    have = env.version(action.package)
    if have is not None and req.specifier.contains(have, prereleases=True):
        return f"{action.package} {have} already satisfies '{action.requirement}'"
    return None


def _uninstall_satisfied(action: PipUninstall, env: PyEnv) -> str | None:
    return f"{action.package} is not installed" if env.version(_canon(action.package)) is None else None


def _torch_satisfied(action: ReinstallTorch, env: PyEnv) -> str | None:
    have = env.version("torch")
    if have is not None and _local(have) == action.index:
        return f"torch {have} already comes from the {action.index} index"
    return None


# action type -> why it has nothing left to do in an environment (or None)
_SATISFIED: dict[type, Callable[[Any, PyEnv], str | None]] = {
    PipInstall: _install_satisfied, PipUninstall: _uninstall_satisfied, ReinstallTorch: _torch_satisfied,
}


def _satisfied(action: Action, env: PyEnv) -> str | None:
    """Why a pip action has nothing left to do in this environment, or None."""
    check = _SATISFIED.get(type(action))
    return check(action, env) if check else None


def _canon(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def _local(version: str) -> str | None:
    try:
        return Version(version).local
    except InvalidVersion:
        return None


def _torch_requirement(action: ReinstallTorch, env: PyEnv | None) -> str:
    """The same torch release, built for the other index: `torch==2.11.0+cu128` (a plain `torch==2.11.0` would
    count the installed +cu130 build as satisfying it)."""
    have = env.version("torch") if env else None
    if have is None:
        return "torch"
    try:
        return f"torch=={Version(have).public}+{action.index}"
    except InvalidVersion:
        return "torch"


def _pip_item(action: Action, python: str, env: PyEnv | None) -> tuple[str, str, list[str], list[str]]:
    """(op, id, argv, distributions to back up) for a pip or build action."""
    if isinstance(action, PipInstall):
        return "pip_install", f"pip_install:{action.requirement}", pip_argv(python, "install", action.requirement), []
    if isinstance(action, PipUninstall):
        pkg = _canon(action.package)
        return "pip_uninstall", f"pip_uninstall:{pkg}", pip_argv(python, "uninstall", "--yes", action.package), [pkg]
    if isinstance(action, ReinstallTorch):
        argv = pip_argv(python, "install", _torch_requirement(action, env), "--index-url", action.url)
        return "reinstall_torch", f"reinstall_torch:{action.index}", argv, []
    assert isinstance(action, RebuildKernel)
    argv = python_argv(python, "-m", "olmo_doctor", "build-kernels", "--package", action.package, user_paths=True)
    return "rebuild_kernel", f"rebuild_kernel:{action.package}", argv, [_canon(action.package)]


def build_kernels_available() -> bool:
    """build-kernels lives in olmo_doctor.build (another part of the project); fixes that need it wait for it."""
    return find_spec("olmo_doctor.build") is not None


class _Planner:
    """Collects plan items finding by finding; `plan()` assembles them in run order."""

    def __init__(self, facts: dict[str, Any], env: PyEnv | None, py: str, unsafe: bool, from_report: str | None):
        self.facts, self.env, self.py, self.unsafe, self.from_report = facts, env, py, unsafe, from_report
        self.items: list[PlanItem] = []  # items that do not run (held back, manual, blocked)
        self.pip: dict[str, tuple[PlanItem, Action]] = {}  # pip/build items that run, by id: two findings, one run
        self.env_entries: list[envfile.Entry] = []
        self.env_codes: list[str] = []
        self.env_titles: list[str] = []
        self.env_grade = "safe"

    def recommended(self, recommended: dict[str, Any]) -> None:
        for name, var in recommended.items():
            if has_control(var.value):
                continue  # the facts layer drops such values; never write one into env.sh
            self.env_entries.append(envfile.Entry(name, envfile.statement(EnvSet(name, var.value)),
                                                  f"{name}: {var.reason}"))
        if recommended:
            self.env_codes.append(ENV_CODE)
            self.env_titles.append("recommended build environment")

    def finding(self, finding: Finding) -> None:
        for fix in finding.fixes:
            self._fix(finding.code, fix)

    def _fix(self, code: str, fix: Fix) -> None:
        if not fix.automatic:
            self.items.append(PlanItem(f"manual:{code}:{fix.title}", "manual", [code], fix.title, "manual",
                                       "manual", fix.title, commands=list(fix.commands)))
            return
        try:
            actions = _checked_actions(fix, f"{code} fix '{fix.title}'")
        except (ActionUnresolved, ActionBadValue) as e:  # the facts made this machine's action unusable
            self.items.append(PlanItem(f"blocked:{code}:{fix.title}", "blocked", [code], fix.title,
                                       fix.applicability, "blocked", fix.title, reason=str(e),
                                       commands=list(fix.commands)))
            return
        allowed = _allowed(fix, self.unsafe)
        for action in actions:
            if not allowed:
                self._held(code, fix, action)
            elif isinstance(action, ENV_ACTIONS):
                self._env(code, fix, action)
            else:
                self._pip(code, fix, action)

    def _held(self, code: str, fix: Fix, action: Action) -> None:
        """An unsafe fix without --unsafe-fixes: listed with what it would run, so the user can judge it."""
        op, key, argv = "write_env_file", action.describe(), None
        if not isinstance(action, ENV_ACTIONS):
            op, key, argv, _ = _pip_item(action, self.py, self.env)
        self.items.append(PlanItem(f"needs_unsafe:{code}:{key}", op, [code], fix.title, fix.applicability,
                                   "needs_unsafe", action.describe(), reason=_why_not("needs_unsafe"), argv=argv,
                                   commands=list(fix.commands)))

    def _env(self, code: str, fix: Fix, action: Any) -> None:
        note = ""
        if isinstance(action, Ulimit):
            action, note = _ulimit_comment(action, self.facts)
        self.env_entries.append(envfile.entry(action, f"{code} {fix.title}{note}"))
        self.env_codes.append(code)
        self.env_titles.append(fix.title)
        if fix.applicability == "unsafe":
            self.env_grade = "unsafe"

    def _pip(self, code: str, fix: Fix, action: Action) -> None:
        op, key, argv, backup = _pip_item(action, self.py, self.env)
        if key in self.pip:
            self.pip[key][0].codes.append(code)
            return
        item = PlanItem(key, op, [code], fix.title, fix.applicability, "apply", action.describe(), argv=argv,
                        commands=list(fix.commands), backup=backup)
        self.pip[key] = (item, action)

    def _refine_pip(self) -> None:
        """An install is judged against the environment as the planned uninstalls leave it (OD251: remove a
        broken ninja, install it again: the install is not "already satisfied")."""
        after = self.env
        for item, action in self.pip.values():
            if isinstance(action, PipUninstall):
                _refine(item, action, self.env, self.from_report, self.unsafe)
                if item.status == "apply" and after is not None:
                    gone = _canon(action.package)
                    after = replace(after, dists={k: v for k, v in after.dists.items() if k != gone})
        for item, action in self.pip.values():
            if not isinstance(action, PipUninstall):
                _refine(item, action, after, self.from_report, self.unsafe)

    def plan(self, env_text: str | None) -> list[PlanItem]:
        self._refine_pip()
        items = _env_items(self.env_entries, self.env_codes, self.env_titles, env_text, self.env_grade)
        items += [*(item for item, _ in self.pip.values()), *self.items]
        # what runs first, in run order (env file, uninstalls, installs, torch, kernels), then what does not
        items.sort(key=lambda i: (STATUSES.index(i.status) if i.status != "done" else 0,
                                  OP_ORDER.get(i.op, 9), i.codes[0] if i.codes else ""))
        return items


def _checked_actions(fix: Fix, where: str) -> list[Action]:
    """The fix's typed actions; UsageError naming the rule when one is invalid or graded too leniently."""
    try:
        actions = parse_actions(fix.action, where)
        for action in actions:
            if fix.applicability == "safe" and touches_compiled(action):
                raise ActionError(f"{where}: {action.op} replaces torch or a compiled kernel, so the fix must be "
                                  "graded 'unsafe'")
    except (ActionUnresolved, ActionBadValue):
        raise
    except ActionError as e:
        raise UsageError(f"rule {e}") from None
    return actions


def _selected(only: Iterable[str] | None) -> set[str] | None:
    """The codes `--only` names, upper-cased; None: everything."""
    return {c.strip().upper() for c in only} if only is not None else None


def make_plan(
    findings: Iterable[Finding],
    recommended: dict[str, Any],
    facts: dict[str, Any],
    *,
    project: str,
    env: PyEnv | None,
    env_text: str | None,
    unsafe: bool = False,
    only: Iterable[str] | None = None,
    python: str | None = None,
    from_report: str | None = None,
) -> FixPlan:
    """Everything `fix --apply` would do for these findings. Raises UsageError when a rule's action is invalid.

    `recommended` is envplan.recommend's output (name -> EnvVar), `env` the target environment (None when planning
    for a report), `env_text` the current .olmo-doctor/env.sh (None when absent), `only` rule codes and/or 'env'."""
    selected = _selected(only)
    py = _target_python(env, python, facts)
    planner = _Planner(facts, env, py, unsafe, from_report)
    if selected is None or ENV_CODE.upper() in selected:
        planner.recommended(recommended)
    used = [f for f in findings if selected is None or f.code in selected]
    for finding in used:
        planner.finding(finding)
    return FixPlan(project, py, env.kind if env else None, unsafe, planner.plan(env_text), _summaries(used),
                   sorted(selected) if selected is not None else None, from_report)


def _target_python(env: PyEnv | None, python: str | None, facts: dict[str, Any]) -> str:
    """The interpreter pip runs in: the environment's, else the one given, else the report's."""
    if env:
        return env.python
    return python or str(facts.get("python.executable") or "python")


def _summaries(findings: list[Finding]) -> list[dict[str, str]]:
    return [{"code": f.code, "severity": f.severity, "title": f.title} for f in findings]


def _why_not(status: str) -> str:
    return {"needs_unsafe": "unsafe: add --unsafe-fixes to run it"}.get(status, "")


def _refine(item: PlanItem, action: Action, env: PyEnv | None, from_report: str | None, unsafe: bool) -> None:
    """Mark an item done when the environment already has what it asks, held back outside a venv, or blocked."""
    if isinstance(action, RebuildKernel) and not build_kernels_available():
        item.status, item.reason = "blocked", "build-kernels is not available in this olmo-doctor"
        return
    if env is None:
        if from_report:
            item.reason = "planned from a report: run `olmo-doctor fix` on that machine to apply"
        return
    if done := _satisfied(action, env):
        item.status, item.reason = "done", done
        return
    _refine_for_env(item, env, unsafe)


def _refine_for_env(item: PlanItem, env: PyEnv, unsafe: bool) -> None:
    """Held back in another venv than olmo-doctor's, blocked without pip, unsafe outside a venv."""
    if env.foreign_venv:
        item.status = "needs_venv"
        item.reason = (f"the active venv is {env.active_venv}, but olmo-doctor runs in {env.prefix}; run the "
                       f"olmo-doctor installed in {env.active_venv} (or deactivate it)")
        return
    if not env.has_pip:
        item.status, item.reason = "blocked", f"there is no pip in {env.prefix} (python -m ensurepip adds it)"
        return
    if not env.isolated:
        # pip into the system Python is unsafe whatever the rule says: it changes more than this project
        item.applicability = "unsafe"
        item.reason = f"{env.python} is not in a virtual environment, so pip changes the system Python"
        if not unsafe:
            item.status = "needs_venv"
            item.reason += "; activate your venv, or pass --unsafe-fixes to allow it"


def _env_file_description(new: str) -> str:
    entries = envfile.parse(new).entries
    exports = sum(e.statement.startswith("export ") for e in entries)
    limits = ", limits" if any(e.key.startswith("ulimit:") for e in entries) else ""
    return f"write {envfile.ENV_FILE} ({exports} export{'' if exports == 1 else 's'}{limits})"


def _changed_lines(old: str | None, new: str) -> list[str]:
    """The +/- lines of a unified diff of the env file, without its headers."""
    diff = difflib.unified_diff((old or "").splitlines(), new.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _env_items(entries: list[envfile.Entry], codes: list[str], titles: list[str], text: str | None,
               grade: str) -> list[PlanItem]:
    if not entries:
        return []
    new = envfile.updated(text, entries)
    item = PlanItem("env_file", "write_env_file", list(dict.fromkeys(codes)), "; ".join(dict.fromkeys(titles)),
                    grade, "apply" if new != text else "done", _env_file_description(new), path=envfile.ENV_FILE,
                    content=new, diff=_changed_lines(text, new),
                    own_lines=list(dict.fromkeys(e.statement for e in entries)))
    if item.status == "done":
        item.reason = f"{envfile.ENV_FILE} already has these lines (source it to use them)"
    return [item]
