"""The wheel must contain every package: pyproject lists them by hand, so check the list is complete."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("olmo_doctor", "olmo", "olmo_common")
        for init in (ROOT / top).rglob("__init__.py")
    }
    missing = found - listed
    assert not missing, f"add these to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"


def test_pyproject_builds_without_deprecation_warnings() -> None:
    """setuptools reads pyproject.toml without a deprecation (license as an SPDX string, a floor that knows it)."""
    import warnings

    from packaging.requirements import Requirement
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(data["project"]["license"], str)
    floor = next(Requirement(r) for r in data["build-system"]["requires"] if r.startswith("setuptools"))
    assert not floor.specifier.contains("76.9"), "license strings need setuptools >= 77"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), str(ROOT / "pyproject.toml"))
    # SetuptoolsDeprecationWarning is a UserWarning, so match the name, not the DeprecationWarning class
    deprecations = [str(w.message).splitlines()[0] for w in caught if "Deprecation" in w.category.__name__]
    assert not deprecations, deprecations
