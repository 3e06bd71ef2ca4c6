"""pyproject's pins: build-only tools stay out of a CPU install, the torch floor matches what the code imports."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
BUILD_ONLY = {"setuptools", "wheel", "ninja", "nvidia-ml-py"}


def _names(reqs: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in reqs}


def test_a_plain_install_pulls_no_build_tools() -> None:
    assert not _names(PROJECT["dependencies"]) & BUILD_ONLY
    assert _names(PROJECT["optional-dependencies"]["build"]) == BUILD_ONLY
    assert "olmo-doctor[build]" in PROJECT["optional-dependencies"]["dev"]  # the build tests need them
    assert isinstance(PROJECT["license"], str)  # the SPDX string, not the deprecated table


def test_torch_floor_covers_the_fsdp2_imports() -> None:
    torch_req = next(Requirement(r) for r in PROJECT["dependencies"] if Requirement(r).name == "torch")
    floor = min(Version(s.version) for s in torch_req.specifier if s.operator == ">=")
    assert floor >= Version("2.6")  # fully_shard / MixedPrecisionPolicy are public in torch.distributed.fsdp from 2.6
    code = (Path(__file__).parents[2] / "olmo" / "parallel.py").read_text()
    assert re.search(r"from torch\.distributed\.fsdp import .*fully_shard", code)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # the installed torch has them

    assert callable(fully_shard) and MixedPrecisionPolicy is not None
