"""The wheel cache: keyed storage, stale keys never match, atomic entries, install of a real local wheel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from build_cache_stand_ins import flash_attn_plan as _plan
from build_cache_stand_ins import stand_in_wheel as _wheel

from olmo_doctor.build import cache
from tests.machines import H200


def test_store_then_lookup_same_key(tmp_path: Path) -> None:
    plan = _plan()
    assert cache.lookup(plan, tmp_path) is None
    stored = cache.store(plan, _wheel(tmp_path), {"wall_s": 97.0}, root=tmp_path)
    assert stored.parent.name == plan.cache_digest and stored.is_file()
    assert cache.lookup(_plan(), tmp_path) == stored
    assert not list(stored.parent.parent.glob(".tmp-*"))  # the temp dir was renamed into place


def test_new_torch_or_arch_misses_the_cache(tmp_path: Path) -> None:
    cache.store(_plan(), _wheel(tmp_path), root=tmp_path)
    assert cache.lookup(_plan({**H200, "torch.version": "2.12.0+cu130"}), tmp_path) is None
    assert cache.lookup(_plan({**H200, "gpu.0.compute_capability": "10.0"}), tmp_path) is None
    assert cache.lookup(_plan(subset="olmo"), tmp_path) is None


def test_tampered_key_is_not_trusted(tmp_path: Path) -> None:
    plan = _plan()
    stored = cache.store(plan, _wheel(tmp_path), root=tmp_path)
    (stored.parent / "key.json").write_text('{"torch": "something else"}')
    assert cache.lookup(plan, tmp_path) is None


def test_install_from_cache_installs_the_wheel(tmp_path: Path) -> None:
    stored = cache.store(_plan(), _wheel(tmp_path), root=tmp_path)
    try:
        proc = cache.install(stored, sys.executable)
        assert proc.returncode == 0, proc.stderr
        out = subprocess.run(
            [sys.executable, "-c", "import olmo_doctor_cachetest as m; print(m.VALUE)"],
            capture_output=True,
            text=True,
        )
        assert out.stdout.strip() == "42"
    finally:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-y", "-q", "olmo_doctor_cachetest"],
            capture_output=True,
        )
