"""`olmo` stands on its own: it imports olmo_doctor only in the doctor gate (olmo/cli/gate.py, inside the function
that needs it; tests/project/test_import_boundaries.py holds every crossing to that), and runs when olmo_doctor
cannot be imported at all. Everything else `olmo` needs (recipes folder, caches) lives in olmo itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_recipes_are_found_by_path_in_a_checkout_and_in_a_wheel(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo import recipe

    assert recipe.recipes_dir() == ROOT / "recipes"
    monkeypatch.setattr(recipe, "_ROOT", tmp_path)
    assert recipe.recipes_dir() is None
    (tmp_path / "olmo_doctor" / "recipes").mkdir(parents=True)  # the wheel's layout (pyproject package-dir)
    assert recipe.recipes_dir() == tmp_path / "olmo_doctor" / "recipes"


@pytest.mark.slow
def test_olmo_works_with_olmo_doctor_unimportable() -> None:
    """With every olmo_doctor import failing, `olmo train NAME --dry-run` still finds a shipped recipe by name."""
    code = ("import sys; sys.modules['olmo_doctor'] = None\n"  # None in sys.modules: any import of it raises
            "sys.argv = ['olmo', 'train', 'olmo2_60m', '--dry-run', '--device', 'cpu']\n"
            "from olmo.cli.main import main\nmain()\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "parameters" in res.stdout and "olmo_doctor" not in res.stderr
