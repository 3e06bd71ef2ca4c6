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

from olmo_doctor import loader_errors
from olmo_doctor.compat import drivers, gpus, kernels, nvcc, pick, versions, wheels
from olmo_doctor.facts import FactValue, gpu_indices


class Unknown(Exception):
    """Raised inside evaluation when a needed fact is None; the whole condition is then unknown."""


class ExprError(ValueError):
    """A rule's expression is malformed or uses something not allowed."""


class _NotStated:
    """What `__raw__` gives for a key a report did not state: neither a value nor a known absence."""


NOT_STATED = _NotStated()


_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")
_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.(?:\w+|\*))+)")
_RAW_FUNCS = {"known", "missing", "default", "stated"}
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


def _stated(x: object) -> bool:
    """Did the facts say anything of x (a value, or that it is absent)? Only a report can leave a fact unstated."""
    return x is not NOT_STATED


def _driver_cuda_has_wheel(cuda: object) -> bool | None:
    """Does a driver that supports this CUDA (nvidia-smi's "CUDA Version", torch's "found version 11040") run any
    current torch wheel? Within a major, minor-version compatibility runs every 12.x build on a 12.0 driver."""
    mm = versions.major_minor(cuda)
    if mm is None:
        return None
    return any((versions.major_minor(i.cuda) or (99, 0))[0] <= mm[0] for i in wheels.CURRENT_GPU_INDEXES)


def _default(x: object, d: object) -> object:
    return d if x is None or x is NOT_STATED else x


def _unbound(*args: Any) -> Any:
    raise Unknown  # a machine function outside evaluate(): no facts to read


def _machine_functions(facts: Mapping[str, FactValue]) -> dict[str, Callable[..., Any]]:
    """The functions that read the machine's facts themselves, all answered by compat/pick.py's choose() (the
    choice install.sh makes) from the driver, every GPU's compute capability, the Python and the CPU arch (an
    unknown driver or GPU is assumed current, an unknown Python not checked): `torch_index()` is the wheel index
    (or, for a driver no current wheel runs on, the newest older one it does; unknown when none fits),
    `torch_index_for_driver(d)` the same for driver d, `torch_refusal()` the code of
    the rule that says why none fits ('' when one does) and `torch_refusal_why()` its reason."""

    def choose(driver: object) -> pick.Pick:
        ccs = [facts.get(f"gpu.{i}.compute_capability") for i in gpu_indices(facts)]
        return pick.choose(driver, [str(c) if c else None for c in ccs], facts.get("python.version"),
                           str(facts.get("os.arch") or "x86_64"))

    def index(driver: object) -> str:
        chosen = choose(driver)
        index = chosen.index or chosen.fallback  # a driver below every current wheel: the newest build it runs
        return _need(index.download_name if index else None)

    return {"torch_index": lambda: index(facts.get("driver.version")),
            "torch_index_for_driver": lambda driver: index(_need(driver)),
            "torch_refusal": lambda: choose(facts.get("driver.version")).refuse or "",
            "torch_refusal_why": lambda: choose(facts.get("driver.version")).why}


def _trainer_requirement(name: object) -> str | None:
    from olmo_doctor.probes.requirements import trainer_requirement

    return trainer_requirement(str(name))


def _table(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a compat lookup: unknown inputs or a missing row make the expression unknown."""

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
    "stated": _stated,
    "satisfies": lambda x, spec: _need(versions.version_satisfies(_need(x), spec)),
    "min": min,
    "max": max,
    "driver_floor": _table(drivers.driver_floor),
    "driver_floor_major": _table(drivers.driver_floor_major),
    "nvcc_max_gcc": _table(nvcc.nvcc_max_gcc),
    "nvcc_supports_cc": _table(nvcc.nvcc_supports_cc),
    "min_nvcc_for_cc": _table(nvcc.min_nvcc_for_cc),
    "flash_attn_arch": _table(kernels.flash_attn_arch),
    "arch_list_covers": _table(wheels.covers),
    "torch_build_covers": _table(wheels.torch_build_covers),
    "gpu_name_to_cc": _table(gpus.name_to_cc),
    "torch_default_cuda": _table(wheels.pypi_default_cuda),
    "sm": _table(nvcc.cc_to_sm),
    "last_nvcc_for_cc": _table(nvcc.last_nvcc_for_cc),
    "tokens": lambda x: [str(t) for t in _need(x)] if isinstance(x, list) else [
        t for t in re.split(r"[;,\s]+", str(_need(x))) if t],  # a list fact is already its tokens
    "cuda_arch_list": _table(nvcc.cuda_arch_list),
    "archs_too_new_for_nvcc": _table(nvcc.archs_too_new_for_nvcc),
    "archs_dropped_by_nvcc": _table(nvcc.archs_dropped_by_nvcc),
    "glibcxx_for_gcc": _table(nvcc.glibcxx_for_gcc),
    "torch_index_for_cuda": _table(wheels.torch_index_for_cuda),
    "torchao_for_torch": _table(kernels.torchao_for_torch),
    # what can be installed today (olmo_doctor/compat/wheels.py)
    "driver_has_wheel": _table(wheels.driver_has_wheel),
    "driver_cuda_has_wheel": _table(_driver_cuda_has_wheel),
    "gpu_has_wheel": _table(wheels.gpu_has_wheel),
    "python_verdict": _table(wheels.python_verdict),
    "torch_python_range": _table(lambda v: "-".join(wheels.python_range(v) or ()) or None),
    "latest_torch": lambda: wheels.LATEST_TORCH,
    # what the installed trainer itself declares (importlib.metadata of olmo-doctor): "torch>=2.6"
    "trainer_requirement": _table(_trainer_requirement),
    "trainer_spec": _table(lambda name: (_trainer_requirement(name) or "")[len(str(name)):] or None),
    "current_driver_floor": lambda: wheels.CURRENT_DRIVER_FLOOR,
    # what a failed import of a compiled extension means, from the loader's words (olmo_doctor/loader_errors.py)
    "load_problem": lambda x: loader_errors.classify(_need(x)) or "",
    # read the machine's facts themselves; bound per evaluation (evaluate), these only let the loader accept them
    **{name: _unbound for name in ("torch_index", "torch_index_for_driver", "torch_refusal", "torch_refusal_why")},
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


def _read_raw(arg: ast.expr) -> None:
    """A fact read inside known()/missing() gives None for an unknown fact instead of raising."""
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "__fact__":
        arg.func.id = "__raw__"


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
                _read_raw(arg)
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
    env: dict[str, Any] = {"__builtins__": {}, **FUNCTIONS, **_NAMES, **_machine_functions(facts)}
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
