"""The condition language of rules: a small, safe subset of Python expressions over dotted fact keys.

    when = "major(nvcc.version) != major(torch.cuda)"
    when = "ver(driver.version) < ver(driver_floor(torch.cuda))"
    when = "cc(gpu.*.compute_capability) < 8.0"          # gpu.* : evaluated once per GPU
    when = "not satisfies(torch.version, '>=2.6')"         # PEP 440: 2.6.0.dev… does not satisfy it

A dotted name is a fact. If any fact an expression needs is unknown (None) the expression is *unknown* and the
rule stays quiet, so a rule never fires on facts a report did not contain. `known(x)` / `missing(x)` test for
that explicitly; in facts read from a report (`facts.partial`) a key the report did not state is unknown, so
`missing(x)` is unknown there too (the rule stays quiet) and `known(x)` is false. Only the functions in
FUNCTIONS can be called; attributes, subscripts and lambdas are refused when a rule is loaded, so a rules file
cannot run code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from olmo_doctor import tables, versions, wheels
from olmo_doctor.facts import FactValue


class Unknown(Exception):
    """Raised inside evaluation when a needed fact is None; the whole condition is then unknown."""


class ExprError(ValueError):
    """A rule's expression is malformed or uses something not allowed."""


class _NotStated:
    """What `__raw__` gives for a key a report did not state: neither a value nor a known absence."""


NOT_STATED = _NotStated()


_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")
_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.(?:\w+|\*))+)")
_RAW_FUNCS = {"known", "missing", "default"}
_INTERNAL = {"__fact__", "__raw__", "__mul__"}
# An expression is one condition of a rule: longer text is not a rule but an attempt to exhaust the parser.
MAX_EXPR = 4000


def _mul(a: object, b: object) -> Any:
    """`*` on numbers only: `'x' * 10**9` or `[1] * 10**9` would make a rule allocate gigabytes."""
    if not all(isinstance(x, (int, float)) for x in (a, b)):
        raise TypeError(f"'*' multiplies numbers, not {type(a).__name__} and {type(b).__name__}")
    return a * b  # type: ignore[operator]


def _need(value: Any) -> Any:
    if value is None:
        raise Unknown
    return value


def _ver(x: object) -> Any:
    v = versions.parse_version(_need(x))
    if v is None:
        raise Unknown
    return v


def _major(x: object) -> int:
    mm = versions.major_minor(_need(x))
    if mm is None:
        raise Unknown
    return mm[0]


def _minor(x: object) -> int:
    mm = versions.major_minor(_need(x))
    if mm is None:
        raise Unknown
    return mm[1]


def _cc(x: object) -> float:
    """Compute capability as a comparable number: '9.0' -> 9.0, '12.1' -> 12.1."""
    mm = versions.major_minor(_need(x))
    if mm is None:
        raise Unknown
    return mm[0] + mm[1] / 10


def _num(x: object) -> float:
    try:
        return float(_need(x))
    except (TypeError, ValueError):
        raise Unknown from None


def _known(x: object) -> bool:
    return x is not None and x is not NOT_STATED


def _missing(x: object) -> bool:
    if x is NOT_STATED:
        raise Unknown  # the report did not say; absent and present are both possible
    return x is None


def _default(x: object, d: object) -> object:
    return d if x is None or x is NOT_STATED else x


def _torch_default_cuda(torch_version: object) -> str | None:
    mm = versions.major_minor(torch_version)
    return tables.TORCH_PYPI_DEFAULT_CUDA.get(f"{mm[0]}.{mm[1]}") if mm else None


def _table(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tables.* lookup: unknown inputs or a missing row make the expression unknown."""

    def call(*args: Any) -> Any:
        out = fn(*[_need(a) for a in args])
        if out is None:
            raise Unknown
        return out

    call.__name__ = fn.__name__
    return call


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ver": _ver,
    "major": _major,
    "minor": _minor,
    "cc": _cc,
    "num": _num,
    "lower": lambda x: str(_need(x)).lower(),
    "matches": lambda x, pattern: re.search(pattern, str(_need(x))) is not None,
    "contains": lambda x, item: item in _need(x),
    "length": lambda x: len(_need(x)),
    "known": _known,
    "missing": _missing,
    "default": _default,
    "satisfies": lambda x, spec: _need(versions.version_satisfies(_need(x), spec)),
    "min": min,
    "max": max,
    "driver_floor": _table(tables.driver_floor),
    "driver_floor_major": _table(tables.driver_floor_major),
    "nvcc_max_gcc": _table(tables.nvcc_max_gcc),
    "nvcc_supports_cc": _table(tables.nvcc_supports_cc),
    "min_nvcc_for_cc": _table(tables.min_nvcc_for_cc),
    "flash_attn_arch": _table(tables.flash_attn_arch),
    "arch_list_covers": _table(tables.arch_list_covers),
    "gpu_name_to_cc": _table(tables.gpu_name_to_cc),
    "torch_default_cuda": _table(_torch_default_cuda),
    "sm": _table(tables.cc_to_sm),
    "last_nvcc_for_cc": _table(tables.last_nvcc_for_cc),
    "tokens": lambda x: [str(t) for t in _need(x)] if isinstance(x, list) else [
        t for t in re.split(r"[;,\s]+", str(_need(x))) if t],  # a list fact is already its tokens
    "cuda_arch_list": _table(tables.cuda_arch_list),
    "archs_too_new_for_nvcc": _table(tables.archs_too_new_for_nvcc),
    "archs_dropped_by_nvcc": _table(tables.archs_dropped_by_nvcc),
    "glibcxx_for_gcc": _table(tables.glibcxx_for_gcc),
    "torch_index_for_cuda": _table(tables.torch_index_for_cuda),
    "torch_index_for_driver": _table(tables.torch_index_for_driver),
    "torchao_for_torch": _table(tables.torchao_for_torch),
    # what can be installed today (olmo_doctor/wheels.py)
    "driver_has_wheel": _table(wheels.driver_has_wheel),
    "gpu_has_wheel": _table(wheels.gpu_has_wheel),
    "python_verdict": _table(wheels.python_verdict),
    "torch_python_range": _table(lambda v: "-".join(wheels.python_range(v) or ()) or None),
    "latest_torch": lambda: wheels.LATEST_TORCH,
    "current_driver_floor": lambda: wheels.CURRENT_DRIVER_FLOOR,
}

_NAMES = {"true": True, "false": False, "True": True, "False": False}
_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare, ast.Eq,
    ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Call, ast.Constant, ast.Name,
    ast.Load, ast.List, ast.Tuple, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.IfExp,
)


def rewrite(source: str) -> str:
    """Replace dotted fact names outside string literals with __fact__("name") calls."""
    out, pos = [], 0
    for m in _STRING.finditer(source):
        out.append(_DOTTED.sub(r'__fact__("\1")', source[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_DOTTED.sub(r'__fact__("\1")', source[pos:]))
    return "".join(out)


def fact_refs(source: str) -> list[str]:
    """The fact keys an expression reads, in order (gpu.* left as is)."""
    refs: list[str] = []
    pos = 0
    for m in [*_STRING.finditer(source), None]:
        chunk = source[pos : m.start()] if m else source[pos:]
        refs += _DOTTED.findall(chunk)
        pos = m.end() if m else pos
    return list(dict.fromkeys(refs))


class _Validate(ast.NodeTransformer):
    def generic_visit(self, node: ast.AST) -> ast.AST:
        if not isinstance(node, _ALLOWED):
            raise ExprError(f"'{type(node).__name__}' is not allowed in a rule expression")
        return super().generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in _NAMES and node.id not in FUNCTIONS and node.id not in _INTERNAL:
            raise ExprError(f"unknown name '{node.id}' (facts are dotted, e.g. torch.cuda)")
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if not isinstance(node.func, ast.Name) or (node.func.id not in FUNCTIONS and node.func.id not in _INTERNAL):
            raise ExprError("only the documented functions can be called")
        if node.keywords:
            raise ExprError("keyword arguments are not allowed")
        if node.func.id in _RAW_FUNCS:  # known(x) / missing(x) must see None instead of raising
            for arg in node.args:
                if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "__fact__":
                    arg.func.id = "__raw__"
        self.generic_visit(node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Mult):  # a call that checks its operands are numbers (_mul)
            return ast.copy_location(ast.Call(ast.Name("__mul__", ast.Load()), [node.left, node.right], []), node)
        return node


@lru_cache(maxsize=1024)
def compile_expr(source: str) -> Any:
    """Parse and validate once; returns a code object evaluated by `evaluate`."""
    if len(source) > MAX_EXPR:
        raise ExprError(f"expression of {len(source)} characters; a rule condition has at most {MAX_EXPR}")
    try:
        tree = ast.parse(rewrite(source).strip(), mode="eval")
        tree = _Validate().visit(tree)
    except SyntaxError as e:
        raise ExprError(f"syntax error in {source[:80]!r}: {e.msg}") from None
    except (RecursionError, MemoryError):  # `not not not ...` or `1+1+...` nested deeper than the parser goes
        raise ExprError(f"expression nested too deeply: {source[:80]!r}...") from None
    ast.fix_missing_locations(tree)
    return compile(tree, "<rule>", "eval")


def evaluate(source: str, facts: Mapping[str, FactValue]) -> Any:
    """Evaluate an expression; raises Unknown when a needed fact is missing."""
    code = compile_expr(source)
    env: dict[str, Any] = {"__builtins__": {}, **FUNCTIONS, **_NAMES}
    env["__fact__"] = lambda key: _need(facts.get(key))
    env["__mul__"] = _mul
    partial = facts.get("facts.partial") is True
    env["__raw__"] = lambda key: NOT_STATED if partial and key not in facts else facts.get(key)
    try:
        return eval(code, env)  # the AST was whitelisted in compile_expr
    except Unknown:
        raise
    except TypeError as e:
        # comparing a fact of the wrong type (e.g. a string with a number) means the fact is not usable here
        raise Unknown(str(e)) from None


def truth(source: str, facts: Mapping[str, FactValue]) -> bool | None:
    """True / False, or None when unknown."""
    try:
        return bool(evaluate(source, facts))
    except Unknown:
        return None
