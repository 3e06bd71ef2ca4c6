"""`olmo` stands on its own: only the doctor gate (`olmo train` checks the machine first) and the kernel record
of `olmo-doctor build-kernels`' GPU check (read by `attn_backend: auto`) import olmo_doctor, inside the one
function that needs it. Everything else `olmo` needs (recipes folder, caches) lives in olmo itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (file, enclosing function, module imported): the intended uses, and nothing else
ALLOWED = {
    ("olmo/cli/main.py", "doctor_gate", "olmo_doctor.api"),
    ("olmo/cli/main.py", "doctor_gate", "olmo_doctor.errors"),
    ("olmo/nn/attention_choice.py", "_recorded_by_build_kernels", "olmo_doctor.build.verify"),
}


def _doctor_imports(source: str) -> set[tuple[str, str]]:
    """(enclosing function or '<module>', module) for every import of olmo_doctor: import statements, and
    importlib.import_module / __import__ calls with a constant name."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            elif isinstance(child, ast.Call) and child.args and isinstance(child.args[0], ast.Constant):
                func = child.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("import_module", "__import__") and isinstance(child.args[0].value, str):
                    names = [child.args[0].value]
            found.update((where, n) for n in names if n == "olmo_doctor" or n.startswith("olmo_doctor."))
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    return found


def test_the_scanner_sees_every_spelling() -> None:
    src = ("import olmo_doctor\nfrom olmo_doctor.facts import KEYS\n"
           "def f():\n    import importlib\n    importlib.import_module('olmo_doctor.api')\n"
           "    class C:\n        def g(self):\n            __import__('olmo_doctor.rules')\n"
           "from olmo_doctor_extra import x\n")
    assert _doctor_imports(src) == {("<module>", "olmo_doctor"), ("<module>", "olmo_doctor.facts"),
                                    ("f", "olmo_doctor.api"), ("g", "olmo_doctor.rules")}


def test_olmo_imports_olmo_doctor_only_for_the_gate_and_the_kernel_record() -> None:
    seen = set()
    for path in sorted((ROOT / "olmo").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        seen |= {(rel, where, mod) for where, mod in _doctor_imports(path.read_text())}
    stray = seen - ALLOWED
    assert not stray, f"olmo must not import olmo_doctor here (move what it needs into olmo): {sorted(stray)}"
    assert seen == ALLOWED, f"an allowed use moved or went away; update ALLOWED: {sorted(ALLOWED - seen)}"


def test_recipes_are_found_by_path_in_a_checkout_and_in_a_wheel(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo import recipe

    assert recipe.recipes_dir() == ROOT / "recipes"
    monkeypatch.setattr(recipe, "_ROOT", tmp_path)
    assert recipe.recipes_dir() is None
    (tmp_path / "olmo_doctor" / "recipes").mkdir(parents=True)  # the wheel's layout (pyproject package-dir)
    assert recipe.recipes_dir() == tmp_path / "olmo_doctor" / "recipes"


def test_olmo_works_with_olmo_doctor_unimportable() -> None:
    """With every olmo_doctor import failing, `olmo train NAME --dry-run` still finds a shipped recipe by name."""
    code = ("import sys; sys.modules['olmo_doctor'] = None\n"  # None in sys.modules: any import of it raises
            "sys.argv = ['olmo', 'train', 'olmo2_60m', '--dry-run', '--device', 'cpu']\n"
            "from olmo.cli.main import main\nmain()\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "parameters" in res.stdout and "olmo_doctor" not in res.stderr
