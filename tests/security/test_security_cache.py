"""Attacks on the wheel cache and on --source archives (issue #12): a wheel placed in the cache folder, or changed
after it was stored, is never installed as "cached"; a --source archive is hashed, the hash shown in the plan,
and an archive swapped after planning is refused before it is unpacked.

Installs go to a stand-in interpreter that writes a marker if it is ever run, so a failed defence cannot change
the test's own environment."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from build_cache_stand_ins import flash_attn_plan as _plan
from build_cache_stand_ins import stand_in_wheel as _wheel

from olmo_doctor.build import cache
from olmo_doctor.build.plan import BuildRequest, plan_build
from olmo_doctor.build.recipes import find_recipe
from olmo_doctor.build.source import prepare
from olmo_doctor.errors import UsageError
from tests.machines import H200, H200_CAPTURE

FA = find_recipe("flash-attn")


@pytest.fixture
def fake_python(tmp_path: Path) -> tuple[str, Path]:
    marker = tmp_path / "installed-marker"
    py = tmp_path / "fakepy"
    py.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\nexit 0\n")
    py.chmod(0o755)
    return str(py), marker


def _planted(root: Path, tmp_path: Path, plan: object) -> Path:
    """A wheel dropped into the right cache folder with a matching key.json, as anyone with write access could."""
    d = cache.entry_dir(plan, root)  # type: ignore[arg-type]
    d.mkdir(parents=True)
    (d / "key.json").write_text(json.dumps(plan.cache_key))  # type: ignore[attr-defined]
    src = tmp_path / "evil-src"
    src.mkdir()
    evil = _wheel(src)
    return evil.replace(d / evil.name)


def test_a_planted_wheel_without_a_record_is_refused(tmp_path: Path, fake_python: tuple[str, Path]) -> None:
    py, marker = fake_python
    root, plan = tmp_path / "cache", _plan()
    planted = _planted(root, tmp_path, plan)
    wheel, why = cache.find(plan, root)
    assert wheel is None and why and "no record" in why
    assert cache.lookup(plan, root) is None
    proc = cache.install(planted, py)
    assert proc.returncode != 0 and "no recorded sha256" in proc.stderr
    assert not marker.exists()


def test_a_wheel_changed_after_it_was_stored_is_refused(tmp_path: Path, fake_python: tuple[str, Path]) -> None:
    py, marker = fake_python
    root, plan = tmp_path / "cache", _plan()
    stored = cache.store(plan, _wheel(tmp_path), root=root)
    assert cache.lookup(plan, root) == stored  # the control: an intact entry is found
    stored.write_bytes(stored.read_bytes() + b"\0evil")
    wheel, why = cache.find(plan, root)
    assert wheel is None and why and "sha256" in why
    proc = cache.install(stored, py)
    assert proc.returncode != 0 and not marker.exists()


def test_only_the_recorded_file_is_used(tmp_path: Path) -> None:
    root, plan = tmp_path / "cache", _plan()
    stored = cache.store(plan, _wheel(tmp_path), root=root)
    other = tmp_path / "o"
    other.mkdir()
    extra = _wheel(other, name="aaa_first")  # sorts before the real one: the old cache installed the first *.whl
    extra.replace(stored.parent / extra.name)
    assert cache.lookup(plan, root) == stored


@pytest.mark.parametrize("name", ["../../evil.whl", "/tmp/evil.whl", "sub/evil.whl", "evil.txt", 7, None])
def test_a_record_naming_another_file_is_refused(tmp_path: Path, name: object) -> None:
    root, plan = tmp_path / "cache", _plan()
    stored = cache.store(plan, _wheel(tmp_path), root=root)
    record = stored.parent / cache.RECORD
    record.write_text(json.dumps({"file": name, "sha256": hashlib.sha256(stored.read_bytes()).hexdigest()}))
    assert cache.find(plan, root)[0] is None


def test_a_symlinked_wheel_is_refused(tmp_path: Path) -> None:
    root, plan = tmp_path / "cache", _plan()
    stored = cache.store(plan, _wheel(tmp_path), root=root)
    copy = tmp_path / "elsewhere.whl"
    copy.write_bytes(stored.read_bytes())
    stored.unlink()
    stored.symlink_to(copy)  # same bytes, but a file outside the cache entry
    wheel, why = cache.find(plan, root)
    assert wheel is None and why and "regular file" in why


def test_a_wheel_swapped_between_lookup_and_install_is_refused(tmp_path: Path,
                                                              fake_python: tuple[str, Path]) -> None:
    py, marker = fake_python
    root, plan = tmp_path / "cache", _plan()
    cache.store(plan, _wheel(tmp_path), root=root)
    found = cache.lookup(plan, root)
    assert found is not None
    found.write_bytes(b"PK swapped")
    assert cache.install(found, py).returncode != 0 and not marker.exists()


def _archive(tmp_path: Path) -> Path:
    tree = tmp_path / "flash_attn-src"
    tree.mkdir()
    (tree / "setup.py").write_text("raise SystemExit('not built in tests')\n")
    path = tmp_path / "flash_attn-local.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(tree, arcname="flash_attn-local")
    return path


def test_source_archive_is_hashed_and_the_hash_shown(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    plan = plan_build(H200, FA, BuildRequest(package="flash-attn", source=str(archive), source_id=digest,
                                             source_sha256=digest))
    assert plan.source["sha256"] == digest
    proc = subprocess.run([sys.executable, "-m", "olmo_doctor", "build-kernels", "--from-report", str(H200_CAPTURE),
                           "--source", str(archive), "--dry-run", "--json"], capture_output=True, text=True,
                          timeout=120)
    assert json.loads(proc.stdout)["plans"][0]["source"]["sha256"] == digest, proc.stderr
    text = subprocess.run([sys.executable, "-m", "olmo_doctor", "build-kernels", "--from-report",
                           str(H200_CAPTURE), "--source", str(archive), "--dry-run"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert digest in text.stdout, text.stdout + text.stderr


def test_a_source_archive_swapped_after_planning_is_not_unpacked(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    planned = hashlib.sha256(archive.read_bytes()).hexdigest()
    archive.write_bytes(archive.read_bytes() + b"\0")  # changed after the plan hashed it
    with pytest.raises(UsageError, match="changed since the plan hashed it"):
        prepare(FA, str(archive), tmp_path / "work", sys.executable, sha256=planned)
    assert not (tmp_path / "work" / "src").exists()


@pytest.mark.parametrize("mac", [None, "", "0" * 64, "forged"])
def test_a_planted_wheel_with_a_matching_record_is_refused(tmp_path: Path, fake_python: tuple[str, Path],
                                                           mac: object) -> None:
    """Whoever can write the cache can write the record too: its sha256 matches their wheel, but only this
    user's olmo-doctor can sign it."""
    py, marker = fake_python
    root, plan = tmp_path / "cache", _plan()
    planted = _planted(root, tmp_path, plan)
    record = {"file": planted.name, "sha256": hashlib.sha256(planted.read_bytes()).hexdigest()}
    (planted.parent / cache.RECORD).write_text(json.dumps(record if mac is None else {**record, "mac": mac}))
    wheel, why = cache.find(plan, root)
    assert wheel is None and why and "not written by olmo-doctor" in why
    assert cache.recorded_sha256(planted) is None
    proc = cache.install(planted, py)
    assert proc.returncode != 0 and not marker.exists()


def test_a_signed_record_moved_to_another_key_is_refused(tmp_path: Path) -> None:
    """A genuine entry copied under another plan's folder (another torch, another arch) is not that plan's."""
    root, plan = tmp_path / "cache", _plan()
    stored = cache.store(plan, _wheel(tmp_path), root=root)
    assert cache.lookup(plan, root) == stored
    (stored.parent / "key.json").write_text(json.dumps({**plan.cache_key, "archs": "80"}))
    assert cache.recorded_sha256(stored) is None
