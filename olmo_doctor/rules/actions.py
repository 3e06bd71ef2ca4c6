"""Fix actions: the closed set of typed operations `olmo-doctor fix --apply` can perform.

A rule's fix carries `action = { op = "...", ... }`. The dataclasses below are the schema, the one place it is
declared (OPS, op -> fields, is derived from them); known_issues/SCHEMA.md's "Fix actions" table documents it and
tests/doctor/test_rules.py holds the two equal. Two checks guard it:
`action_error` checks the shape when a rule loads (template fields such as "{cuda.toolkit_root}" allowed), and
`parse_action` turns a rendered action into one of the typed operations below, strictly: an unknown op, a missing
or extra field, or a bad value is an ActionError that names the rule. Nothing here runs anything; the planner asks
an action what it would do and the executor does it. This module imports nothing heavy: the rule loader uses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from olmo_doctor.shell import has_control

KERNELS = ("flash-attn", "xformers")
ULIMIT_FLAGS = {"nofile": "-n", "memlock": "-l"}  # `ulimit -l` counts KiB, `-n` counts files
TORCH_INDEX_URL = "https://download.pytorch.org/whl/{index}"
# Replacing these changes compiled code the project runs: never a safe fix (SCHEMA.md: "unsafe").
UNSAFE_PACKAGES = frozenset({"torch", "flash-attn", "xformers"})
UNSAFE_OPS = frozenset({"rebuild_kernel", "reinstall_torch"})
# Removing pip would leave the venv unable to undo anything.
PROTECTED_PACKAGES = frozenset({"pip"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")  # PEP 508 names
_INDEX = re.compile(r"^(cpu|cu\d{3}|rocm\d+(\.\d+)*|xpu)$")
_UNKNOWN = re.compile(r"\bunknown\b")  # what the rule engine renders for a fact the machine did not report


class ActionError(ValueError):
    """An action breaks the schema; the message names the rule and the field."""


class ActionUnresolved(ActionError):
    """A templated field rendered to 'unknown': the machine did not report a fact the action needs."""


class ActionBadValue(ActionError):
    """A templated field rendered to a value the op does not accept (e.g. an index 'None' for an odd driver)."""


@dataclass(frozen=True)
class EnvSet:
    name: str
    value: str
    op: ClassVar[str] = "env_set"

    def describe(self) -> str:
        from olmo_doctor.shell import assign  # the one quoting function: this line is printed as a command

        return assign(self.name, self.value)


@dataclass(frozen=True)
class EnvUnset:
    name: str
    op: ClassVar[str] = "env_unset"

    def describe(self) -> str:
        return f"unset {self.name}"


@dataclass(frozen=True)
class Ulimit:
    resource: str
    value: str  # a positive number in ulimit's units, or "hard" (the current hard limit)
    op: ClassVar[str] = "ulimit"

    def describe(self) -> str:
        target = "the hard limit" if self.value == "hard" else self.value
        return f"raise the soft {self.resource} limit to {target} (ulimit -S{ULIMIT_FLAGS[self.resource][1]})"


@dataclass(frozen=True)
class PipInstall:
    requirement: str
    op: ClassVar[str] = "pip_install"

    @property
    def package(self) -> str:
        return canonicalize_name(Requirement(self.requirement).name)

    def describe(self) -> str:
        return f"pip install '{self.requirement}' into the venv"


@dataclass(frozen=True)
class PipUninstall:
    package: str
    op: ClassVar[str] = "pip_uninstall"

    def describe(self) -> str:
        return f"pip uninstall {self.package} from the venv"


@dataclass(frozen=True)
class RebuildKernel:
    package: str
    op: ClassVar[str] = "rebuild_kernel"

    def describe(self) -> str:
        return f"rebuild {self.package} for this torch and GPU (olmo-doctor build-kernels --package {self.package})"


@dataclass(frozen=True)
class ReinstallTorch:
    index: str
    op: ClassVar[str] = "reinstall_torch"

    @property
    def url(self) -> str:
        return TORCH_INDEX_URL.format(index=self.index)

    def describe(self) -> str:
        return f"reinstall torch from the {self.index} wheel index ({self.url})"


Action = EnvSet | EnvUnset | Ulimit | PipInstall | PipUninstall | RebuildKernel | ReinstallTorch
ACTION_TYPES = (EnvSet, EnvUnset, Ulimit, PipInstall, PipUninstall, RebuildKernel, ReinstallTorch)
# The schema, derived from the types above: op -> its fields, all required, no others allowed.
OPS: dict[str, tuple[str, ...]] = {t.op: tuple(f.name for f in fields(t)) for t in ACTION_TYPES}
_TYPE_OF_OP = {t.op: t for t in ACTION_TYPES}
ENV_ACTIONS = (EnvSet, EnvUnset, Ulimit)


def _is_template(value: object) -> bool:
    return isinstance(value, str) and "{" in value.replace("{{", "").replace("}}", "")


def _ulimit_value(value: object) -> str | None:
    if isinstance(value, bool) or not (
        (isinstance(value, int) and value > 0) or (isinstance(value, str) and (value == "hard" or value.isdigit()))
    ):
        return f"value must be a positive number or \"hard\", not {value!r}"
    return None


def _string_problem(key: str, value: object) -> str | None:
    """Every other field is a non-empty one-line string; `name` an environment variable name."""
    if not isinstance(value, str) or not value.strip():
        return f"{key} must be a non-empty string"
    if has_control(value):  # a newline or NUL in a value would end the shell line it is written into
        return f"{key} {value!r} holds a control character"
    if key == "name" and not _ENV_NAME.match(value):
        return f"name {value!r} is not an environment variable name"
    return None


def _ulimit_resource(key: str, value: str) -> str | None:
    if key == "resource" and value not in ULIMIT_FLAGS:
        return f"resource must be one of {', '.join(ULIMIT_FLAGS)}, not {value!r}"
    return None


def _kernel(key: str, value: str) -> str | None:
    return None if value in KERNELS else f"package must be one of {', '.join(KERNELS)}, not {value!r}"


def _index(key: str, value: str) -> str | None:
    if _INDEX.match(value):
        return None
    return f"index must name a PyTorch wheel index such as cu128, cu130 or cpu, not {value!r}"


def _requirement(key: str, value: str) -> str | None:
    try:
        req = Requirement(value)
    except InvalidRequirement as e:
        return f"requirement {value!r} is not a valid requirement: {e}"
    if req.url:
        return f"requirement {value!r} is a URL; fixes install named, versioned requirements only"
    if canonicalize_name(req.name) in PROTECTED_PACKAGES:
        return f"requirement {value!r}: fix --apply never changes pip itself"
    return None


def _removable(key: str, value: str) -> str | None:
    if not _DIST_NAME.match(value):
        return f"package {value!r} is not a distribution name"
    if canonicalize_name(value) in PROTECTED_PACKAGES:
        return "fix --apply never removes pip (undo needs it)"
    return None


# op -> what else its string fields must be
_VALUE_CHECKS: dict[str, Callable[[str, str], str | None]] = {
    "ulimit": _ulimit_resource,
    "rebuild_kernel": _kernel,
    "reinstall_torch": _index,
    "pip_install": _requirement,
    "pip_uninstall": _removable,
}


def _check_value(op: str, key: str, value: object) -> str | None:
    """What is wrong with one literal field value, or None."""
    if op == "ulimit" and key == "value":
        return _ulimit_value(value)
    if (problem := _string_problem(key, value)) is not None:
        return problem
    check = _VALUE_CHECKS.get(op)
    return check(key, str(value)) if check else None


def touches_compiled(action: Action) -> bool:
    """Does the action replace torch or a compiled kernel (and so must be graded unsafe)?"""
    if isinstance(action, (RebuildKernel, ReinstallTorch)):
        return True
    if isinstance(action, PipInstall):
        return action.package in UNSAFE_PACKAGES
    if isinstance(action, PipUninstall):
        return canonicalize_name(action.package) in UNSAFE_PACKAGES
    return False


def action_error(raw: object, applicability: str | None = None) -> str | None:
    """Why a rule's (unrendered) action breaks the schema, or None when it is well formed."""
    if err := _shape_error(raw):
        return err
    assert isinstance(raw, Mapping)
    op = raw["op"]
    if err := _fields_error(op, raw):
        return err
    if applicability == "safe" and (op in UNSAFE_OPS or _unsafe_literal(op, raw)):
        return f"op {op} replaces torch or a compiled kernel, so its fix must be 'unsafe', not 'safe'"
    return None


def _fields_error(op: str, raw: Mapping[str, Any]) -> str | None:
    """The first literal field value the op does not accept (templates are checked once rendered)."""
    for key in OPS[op]:
        if key == "name" and _is_template(raw[key]):
            return "name must be a literal variable name, not a template"
        if not _is_template(raw[key]) and (err := _check_value(op, key, raw[key])):
            return f"op {op}: {err}"
    return None


def _unsafe_literal(op: str, raw: Mapping[str, Any]) -> bool:
    if op == "pip_install" and not _is_template(raw["requirement"]):
        return canonicalize_name(Requirement(raw["requirement"]).name) in UNSAFE_PACKAGES
    if op == "pip_uninstall" and not _is_template(raw["package"]):
        return canonicalize_name(raw["package"]) in UNSAFE_PACKAGES
    return False


def _shape_error(raw: object) -> str | None:
    if not isinstance(raw, Mapping):
        return "action must be a table like { op = \"pip_install\", requirement = \"ninja\" }"
    op = raw.get("op")
    if op not in OPS:
        return f"unknown op {op!r}; use one of {', '.join(OPS)}"
    fields = OPS[op]
    missing = [k for k in fields if k not in raw]
    if missing:
        return f"op {op} needs {', '.join(missing)} (fields: {', '.join(fields)})"
    extra = sorted(set(raw) - {"op", *fields})
    if extra:
        return f"op {op} has unknown field(s) {', '.join(extra)} (fields: {', '.join(fields)})"
    return None


def parse_action(raw: object, where: str) -> Action:
    """A rendered action as a typed operation. A broken shape (unknown op, missing or extra field) is an
    ActionError naming `where` (the rule); a value the facts made unusable is ActionUnresolved/ActionBadValue."""
    if err := _shape_error(raw):
        raise ActionError(f"{where}: {err}")
    assert isinstance(raw, Mapping)
    op = raw["op"]
    values = {k: str(raw[k]) if op == "ulimit" and k == "value" else raw[k] for k in OPS[op]}
    for key, value in values.items():
        _check_field(where, op, key, value)
    return _TYPE_OF_OP[op](**values)


def _check_field(where: str, op: str, key: str, value: object) -> None:
    """Raise when a field still holds an unknown fact, or a value the op cannot carry."""
    if isinstance(value, str) and _UNKNOWN.search(value):
        raise ActionUnresolved(f"{where}: {op} {key} needs a fact this machine did not report ({value!r})")
    if err := _check_value(op, key, value):
        raise ActionBadValue(f"{where}: op {op}: {err}")


def parse_actions(raw: object, where: str) -> list[Action]:
    """A fix's `action`: one table, or a list of them (applied in order)."""
    if isinstance(raw, list):
        if not raw:
            raise ActionError(f"{where}: action list is empty")
        return [parse_action(a, f"{where} action[{i}]") for i, a in enumerate(raw)]
    return [parse_action(raw, where)]


def actions_error(raw: object, applicability: str | None = None) -> str | None:
    """action_error for a table or a list of tables (what the rule loader calls)."""
    if isinstance(raw, list):
        if not raw:
            return "action list is empty"
        for i, item in enumerate(raw):
            if err := action_error(item, applicability):
                return f"action[{i}]: {err}"
        return None
    return action_error(raw, applicability)
