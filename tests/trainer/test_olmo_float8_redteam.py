"""`precision: fp8` with a torchao that is there but unfit: an import that fails with "cannot import name" (an
ImportError that is not a missing package), a torchao.float8 without the two names the trainer calls, a torchao
without a float8 module. Each is one line on stderr, exit 2, nothing trained or written, and it names torchao as
installed but unusable (never "not installed")."""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import pytest

from olmo.config import TrainConfig
from olmo.nn import float8
from olmo.recipe import to_yaml


def _module_not_found(name: str) -> Callable[[], object]:
    def fail() -> object:
        raise ModuleNotFoundError(f"No module named '{name}'", name=name)
    return fail


def _cannot_import_name() -> object:
    raise ImportError("cannot import name 'Float8LinearConfig' from 'torchao.float8' (/venv/torchao/float8/x.py)",
                      name="torchao.float8")


UNFIT = {
    "cannot-import-name": (_cannot_import_name, "fails to import"),
    "no-float8-module": (_module_not_found("torchao.float8"), "fails to import"),
    "float8-without-the-api": (lambda: types.ModuleType("torchao.float8"), "Float8LinearConfig"),
    "not-installed": (_module_not_found("torchao"), "not installed"),
}


@pytest.mark.parametrize("case", list(UNFIT), ids=list(UNFIT))
def test_an_unfit_torchao_is_one_line_exit_2(case: str, cli: Callable[..., tuple[int, str, str]],
                                             monkeypatch: pytest.MonkeyPatch, tiny_data: Path, tmp_path: Path,
                                             micro: Callable[..., TrainConfig]) -> None:
    importer, says = UNFIT[case]
    monkeypatch.setattr(float8, "_import_float8", importer)
    cfg = micro(tiny_data, tmp_path / "run")
    cfg.precision = "fp8"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(to_yaml(cfg))
    code, out, err = cli("train", str(recipe), "--skip-doctor")
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("WARNING: --skip-doctor")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err + out, err
    assert "torchao" in lines[0] and says in lines[0]
    assert ("not installed" in lines[0]) == (case == "not-installed")
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("step*"))
