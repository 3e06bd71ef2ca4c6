"""How the packages import each other, read from their source with `ast` (nothing is imported).

- No import cycle inside `olmo`, counting imports made inside functions (a cycle hidden in a function still ties
  the two modules together: neither can be read, tested or moved without the other).
- `olmo` and `olmo_doctor` touch through one narrow interface each way: olmo imports olmo_doctor only in
  `olmo/cli/gate.py` (the doctor gate), always inside a function so olmo runs without its doctor; olmo_doctor
  imports olmo only to run `olmo.smoke` (`olmo-doctor verify`) and to start the `olmo` command.
- `olmo_common`, which both share, imports neither.

A new cross-package import outside these fails here with the file, the function and the module it names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("olmo", "olmo_doctor", "olmo_common")

# (importing module, enclosing function, imported module): every olmo -> olmo_doctor import: the gate, and the
# limit guard of `python -m olmo`
OLMO_TO_DOCTOR = {
    ("olmo.cli.gate", "doctor_gate", "olmo_doctor.api"),
    ("olmo.cli.gate", "doctor_gate", "olmo_doctor.errors"),
    # tools are looked up in PATH's absolute entries only, the same way in both commands
    ("olmo.cli.gate", "plan_device", "olmo_doctor.isolation"),
    ("olmo.cli.gate", "isolate_tool_path", "olmo_doctor.isolation"),
    # the machine's fault behind an error, in one line: a memory limit of this process first
    ("olmo.cli.gate", "limit_fault", "olmo_doctor.live_faults"),
    ("olmo.cli.gate", "environment_fault", "olmo_doctor.diagnose"),
    ("olmo.cli.gate", "environment_fault", "olmo_doctor.live_faults"),
    # the attention backend build-kernels measured fastest, read by `attn_backend: auto`
    ("olmo.cli.gate", "kernels_measured_backend", "olmo_doctor.build.verify"),
    # `python -m olmo`, the command's other launcher: a memory limit too small for olmo's own imports (the CLI,
    # rich, tokenizers) is named before any of them runs, so the guard cannot wait for the gate's imports
    ("olmo.__main__", "_guard", "olmo_doctor.live_faults"),
}
# every olmo_doctor -> olmo import: verify's smoke run (and the error type it raises), and the `olmo` console
# script, which starts in olmo_doctor so that a foreign `olmo` package is named instead of crashing
DOCTOR_TO_OLMO = {
    ("olmo_doctor.commands.verify", "verify", "olmo.smoke"),
    ("olmo_doctor.commands.verify", "verify", "olmo.errors"),
    ("olmo_doctor.olmo_clash", "_olmo_main", "olmo.cli.main"),
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool = False) -> set[tuple[str, str]]:
    """(enclosing function or '<module>', imported name) for every import: `import a.b`, `from a import b` (as
    `a.b`, and `a`), relative imports resolved against `module`, and importlib.import_module / __import__ calls
    with a constant name."""
    found: set[tuple[str, str]] = set()
    here = module.split(".") if is_package else module.split(".")[:-1]

    def named(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
            return [base, *(f"{base}.{a.name}" for a in node.names)]
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                return [node.args[0].value]
        return []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            found.update((where, name) for name in named(child) if name)
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where)

    visit(ast.parse(source), "<module>")
    return found


def sources(root: Path, packages: tuple[str, ...] = PACKAGES) -> Iterator[tuple[str, Path]]:
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            yield module_name(path, root), path


def _resolve(imported: str, known: set[str]) -> str:
    """The module `imported` names: itself, or for `from a.b import name` where name is no module, a.b. A name
    that is neither (a module that is gone) stays as written, so it is still seen."""
    parent = imported.rpartition(".")[0]
    return imported if imported in known else parent if parent in known else imported


def edges(root: Path, packages: tuple[str, ...] = PACKAGES) -> set[tuple[str, str, str]]:
    """(importer, enclosing function, imported module) for every import from `packages` into `packages`; other
    names (torch, typer) are left out."""
    known = {name for name, _ in sources(root, packages)}
    out = set()
    for name, path in sources(root, packages):
        for where, imported in imports_of(path.read_text(), name, path.name == "__init__.py"):
            target = _resolve(imported, known)
            if target.split(".")[0] in packages and target != name:
                out.add((name, where, target))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def package_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports, plus its parent packages (importing olmo.data.shards runs
    olmo/data/__init__.py first)."""
    graph: dict[str, set[str]] = {name: set() for name, _ in sources(root, (package,))}
    for importer, _, imported in edges(root, (package,)):
        if imported in graph:  # a module that is gone cannot be part of a cycle
            graph[importer].add(imported)
    for name in graph:
        parts = name.split(".")
        graph[name] |= {".".join(parts[:i]) for i in range(1, len(parts))} - {name}
    return graph


def crossing(root: Path, source: str, target: str) -> set[tuple[str, str, str]]:
    return {(a, where, b) for a, where, b in edges(root) if a.split(".")[0] == source and b.split(".")[0] == target}


# ------------------------------------------------------------------------------------ the scanner can see them
def _tree(tmp: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)
    return tmp


def test_the_scanner_sees_every_spelling() -> None:
    src = ("import olmo_doctor\nfrom olmo_doctor.facts import KEYS\n"
           "def f():\n    import importlib\n    importlib.import_module('olmo_doctor.api')\n"
           "    class C:\n        def g(self):\n            __import__('olmo_doctor.rules')\n"
           "from . import sibling\nfrom ..errors import OlmoError\n")
    found = imports_of(src, "olmo.data.reader")
    assert {("<module>", "olmo_doctor"), ("<module>", "olmo_doctor.facts"), ("f", "olmo_doctor.api"),
            ("g", "olmo_doctor.rules"), ("<module>", "olmo.data.sibling"), ("<module>", "olmo.errors")} <= found


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"olmo/__init__.py": "", "olmo/a.py": "from olmo.b import x\n",
                            "olmo/b.py": "def x():\n    from olmo import c\n", "olmo/c.py": "import olmo.a\n",
                            "olmo/d.py": "import olmo.a\n"})
    assert cycles(package_graph(root, "olmo")) == [["olmo.a", "olmo.b", "olmo.c"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"olmo/__init__.py": "", "olmo/data/__init__.py": "from olmo.data.shards import x\n",
                            "olmo/data/shards.py": "from olmo.config import y\n",
                            "olmo/config.py": "from olmo.data.other import z\n", "olmo/data/other.py": ""})
    assert cycles(package_graph(root, "olmo")) == [["olmo.config", "olmo.data", "olmo.data.other",
                                                    "olmo.data.shards"]]


def test_a_new_crossing_is_seen(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"olmo/__init__.py": "", "olmo/model.py": "def f():\n    import olmo_doctor.facts\n",
                            "olmo_doctor/__init__.py": "", "olmo_doctor/facts.py": "",
                            "olmo_common/__init__.py": "from olmo.model import f\n"})
    assert crossing(root, "olmo", "olmo_doctor") == {("olmo.model", "f", "olmo_doctor.facts")}
    assert crossing(root, "olmo_common", "olmo") == {("olmo_common", "<module>", "olmo.model")}
    (root / "olmo" / "cli.py").write_text("from olmo_doctor.gone.module import thing\n")  # a package removed
    assert ("olmo.cli", "<module>", "olmo_doctor.gone.module.thing") in crossing(root, "olmo", "olmo_doctor")


# ------------------------------------------------------------------------------------------- the real tree
def test_olmo_has_no_import_cycle() -> None:
    graph = package_graph(ROOT, "olmo")
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the scan read the package
    assert cycles(graph) == [], "import cycles inside olmo (break each by moving what both need into a third module)"


def test_olmo_imports_olmo_doctor_only_in_the_gate() -> None:
    seen = crossing(ROOT, "olmo", "olmo_doctor")
    stray = seen - OLMO_TO_DOCTOR
    assert not stray, f"olmo imports olmo_doctor outside olmo/cli/gate.py (call the gate instead): {sorted(stray)}"
    assert seen == OLMO_TO_DOCTOR, f"an allowed use moved or went away; update OLMO_TO_DOCTOR: " \
                                   f"{sorted(OLMO_TO_DOCTOR - seen)}"
    assert {where for _, where, _ in seen} & {"<module>"} == set()  # olmo still imports without olmo_doctor


def test_olmo_doctor_imports_olmo_only_for_verify_and_the_olmo_command() -> None:
    seen = crossing(ROOT, "olmo_doctor", "olmo")
    stray = seen - DOCTOR_TO_OLMO
    assert not stray, f"olmo_doctor imports olmo beyond its two uses (the smoke run, the olmo command): " \
                      f"{sorted(stray)}"
    assert seen == DOCTOR_TO_OLMO, f"an allowed use moved or went away; update DOCTOR_TO_OLMO: " \
                                   f"{sorted(DOCTOR_TO_OLMO - seen)}"


def test_olmo_common_imports_neither_package() -> None:
    assert crossing(ROOT, "olmo_common", "olmo") | crossing(ROOT, "olmo_common", "olmo_doctor") == set()
