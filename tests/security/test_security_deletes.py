"""Every call that deletes, renames or replaces a file in olmo/, olmo_doctor/ and olmo_common/, reviewed against the
rule "a command deletes or replaces only what it created", with the test that attacks it.

`AUDIT` lists each call site (file, enclosing function, call as written) with why it can only touch what the
command made, and the test that tries to make it touch something else (a symlink swapped in, a user's file
with the same name, a folder that is a run, nested outputs, a path inside the output). A new call site, or one
that moved, fails `test_every_delete_and_replace_call_site_is_reviewed` until it is reviewed and listed here.
The doctor-side attacks live in this file; the trainer's in tests/trainer/test_olmo_owned_outputs.py and the files
named below.
"""

from __future__ import annotations

import ast
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"rmtree", "unlink", "remove", "rmdir", "removedirs", "replace", "rename", "renames", "move"}
OWNED = "tests/trainer/test_olmo_owned_outputs.py"
HERE = "tests/security/test_security_deletes.py"
LEFTOVERS = "tests/security/test_attack_checkpoint_leftovers.py"

# (file, function, call) -> (why it touches only what the command created, the test attacking it)
AUDIT: dict[tuple[str, str, str], tuple[str, str]] = {
    # ------------------------------------------------------------------ the one atomic write (olmo_common)
    ("olmo_common/atomic.py", "commit", "os.replace"): (
        "renames this call's own mkstemp temp file over the caller's target; every caller writes inside a folder "
        "its command owns (checked by olmo/outputs.py for outputs, by the run_dir check for runs)",
        f"{HERE}::test_atomic_write_never_touches_a_planted_temp_name"),
    ("olmo_common/atomic.py", "abort", "os.unlink"): (
        "the temp file mkstemp made in this call (O_EXCL: a fresh name, never a planted one)",
        f"{HERE}::test_atomic_write_never_touches_a_planted_temp_name"),
    # ------------------------------------------------------------------ owned outputs (olmo/outputs.py)
    ("olmo/outputs.py", "discard", "shutil.rmtree"): (
        "the temp folder new_temp made with mkdtemp in this command (nothing else writes into it)",
        f"{OWNED}::test_a_failure_while_replacing_leaves_the_old_output"),
    ("olmo/outputs.py", "publish", "os.rename"): (
        "three renames: our finished temp folder to OUT when OUT is new; OUT (claimed again just before: empty or "
        "this command's own, and held exclusively) onto a fresh mkdtemp folder; our temp folder into place",
        f"{OWNED}::test_a_folder_swapped_for_a_link_between_claim_and_publish"),
    ("olmo/outputs.py", "remove_own", "os.rmdir"): (
        "only folders of the command's own names in its moved-aside output, and only when empty",
        f"{OWNED}::test_what_publish_finds_added_meanwhile_is_kept_aside"),
    ("olmo/outputs.py", "remove_own", "os.unlink"): (
        "only regular files of the command's own names (never a link's target) in its moved-aside output",
        f"{OWNED}::test_what_publish_finds_added_meanwhile_is_kept_aside"),
    ("olmo/outputs.py", "remove_own", "folder.rmdir"): (
        "the moved-aside old output, only once empty (anything else keeps it, named in a warning)",
        f"{OWNED}::test_what_publish_finds_added_meanwhile_is_kept_aside"),
    # ------------------------------------------------------------------ checkpoints
    ("olmo/checkpoint.py", "save", "shutil.rmtree"): (
        "the step-N-tmp folder rank 0 made with mkdir in this call, on a failed save",
        "tests/trainer/test_olmo_disk_full.py::test_checkpoint_save_on_a_full_disk"),
    ("olmo/checkpoint.py", "_write", "os.rename"): (
        "our finished step-N-tmp to step-N in this run_dir's checkpoints/ (the run_dir check refuses a folder "
        "whose files olmo train did not write)",
        f"{HERE}::test_train_never_replaces_a_run_dirs_files_it_did_not_write"),
    ("olmo/checkpoint_leftovers.py", "remove_leftovers", "shutil.rmtree"): (
        "real step-N-tmp / -deleting-XXXXXXXX folders of plain files a killed save of this run_dir left, by exact "
        "name (a user's step3-tmp.tar.gz is not one); a symlink or another kind of entry at those names is refused "
        "in one line (leftovers), never followed or deleted",
        f"{LEFTOVERS}::test_a_symlinked_step_tmp_on_resume_is_one_line_and_not_followed"),
    ("olmo/checkpoint_leftovers.py", "remove_leftovers", "p.unlink"): (
        "temp pointer files (.latest.XXXXXXXX.tmp, mkstemp's exact name) a killed save left; links refused as above",
        f"{LEFTOVERS}::test_a_symlinked_step_tmp_on_resume_is_one_line_and_not_followed"),
    ("olmo/checkpoint.py", "save_weights", "os.rename"): (
        "our mkdtemp folder to a new path (a rename never replaces a non-empty folder)",
        f"{HERE}::test_save_weights_never_replaces_an_existing_folder"),
    ("olmo/checkpoint.py", "save_weights", "shutil.rmtree"): (
        "the mkdtemp folder this call made, when the rename did not happen",
        f"{HERE}::test_save_weights_never_replaces_an_existing_folder"),
    ("olmo/fsutil.py", "remove_tree", "path.unlink"): (
        "a symlink at one of this run's checkpoint names (keep_last_n, a step saved again) loses only the link",
        "tests/trainer/test_olmo_hostile_files.py::test_removing_a_symlinked_checkpoint_folder_removes_only_the_link"),
    ("olmo/fsutil.py", "remove_tree", "os.rename"): (
        "this run's own checkpoint folder onto a fresh mkdtemp trash folder (no fixed trash name is touched)",
        "tests/trainer/test_olmo_hostile_files.py::test_removing_a_symlinked_checkpoint_folder_removes_only_the_link"),
    ("olmo/fsutil.py", "remove_tree", "shutil.rmtree"): (
        "the trash folder made and filled by the rename just before",
        "tests/trainer/test_olmo_hostile_files.py::test_removing_a_symlinked_checkpoint_folder_removes_only_the_link"),
    ("olmo/fsutil.py", "remove_empty_dirs", "d.rmdir"): (
        "folders this command created (missing_dirs before mkdir), only when empty",
        "tests/trainer/test_olmo_bad_inputs.py::test_an_os_error_from_the_environment_is_one_line"),
    # ------------------------------------------------------------------ prepare-data
    ("olmo/data/prepare.py", "finish", "final.unlink"): (
        "the shard this writer renamed into place a moment ago, when its sidecar could not be written",
        "tests/trainer/test_olmo_disk_full.py::test_prepare_data_on_a_full_disk_keeps_finished_shards_and_resumes"),
    ("olmo/data/prepare_folder.py", "roll_back", "p.unlink"): (
        "files of prepare-data's own names this run added (not there before it), never links",
        f"{HERE}::test_a_failed_prepare_keeps_a_file_the_user_dropped_in_meanwhile"),
    ("olmo/data/prepare.py", "_prepare", "stale.unlink"): (
        "temp names a killed run left in prepare-data's own output (claimed: marker, own names, no links)",
        "tests/trainer/test_olmo_prepare_workers.py::test_ctrl_c_with_workers_stops_the_pool_and_resumes"),
    ("olmo/lock.py", "release", "self.path.unlink"): (
        "the lock file this process created and holds, only while the path is still that file (same inode)",
        f"{HERE}::test_releasing_a_lock_never_removes_a_file_put_in_its_place"),
    ("olmo/preflight.py", "check_shared_run_dir", "marker.unlink"): (
        "the marker rank 0 wrote in this call under a name holding this call's nonce",
        "tests/trainer/test_olmo_distributed.py::test_fsdp_matches_one_process_then_resumes_on_one"),
    ("olmo/smoke.py", "run_smoke", "shutil.rmtree"): (
        "the temp root rank 0 made with mkdtemp for a smoke run without --keep",
        f"{OWNED}::test_a_smoke_run_kept_twice_replaces_only_its_own_run"),
    # ------------------------------------------------------------------ the doctor
    ("olmo_doctor/build/cache.py", "store", "d.unlink"): (
        "an entry name of olmo-doctor's own wheel cache (~/.cache/olmo-doctor/wheels/<package>/<key>): a link "
        "there loses only the link",
        f"{HERE}::test_a_linked_wheel_cache_entry_loses_only_the_link"),
    ("olmo_doctor/build/cache.py", "store", "shutil.rmtree"): (
        "a stale entry folder of olmo-doctor's own wheel cache, replaced on --rebuild",
        f"{HERE}::test_a_linked_wheel_cache_entry_loses_only_the_link"),
    ("olmo_doctor/build/cache.py", "store", "os.replace"): (
        "our mkdtemp entry folder into the cache under its key",
        f"{HERE}::test_a_linked_wheel_cache_entry_loses_only_the_link"),
    ("olmo_doctor/build/source.py", "fetch_sdist", "os.replace"): (
        "the sdist pip downloaded into this call's temp folder, into olmo-doctor's sdist cache (a rename "
        "replaces a link at the name, never writes through it)",
        f"{HERE}::test_the_sdist_cache_copy_never_writes_through_a_planted_temp"),
    ("olmo_doctor/build/source.py", "_unpack", "shutil.rmtree"): (
        "the staging folder this call made with mkdtemp (a fixed name could be a link to extract elsewhere)",
        f"{HERE}::test_unpacking_never_extracts_through_a_planted_staging_link"),
    ("olmo_doctor/build/source.py", "_unpack", "shutil.move"): (
        "the archive's top folder from our staging folder to the build's src/ (removed just before)",
        f"{HERE}::test_unpacking_never_extracts_through_a_planted_staging_link"),
    ("olmo_doctor/build/source.py", "prepare", "dest.unlink"): (
        "a link at the build folder's src/ name in olmo-doctor's cache: the link only",
        f"{HERE}::test_a_linked_build_source_folder_loses_only_the_link"),
    ("olmo_doctor/build/source.py", "prepare", "shutil.rmtree"): (
        "src/ an earlier build of the same plan unpacked into olmo-doctor's cache (a real folder, not a link)",
        f"{HERE}::test_a_linked_build_source_folder_loses_only_the_link"),
    ("olmo_doctor/build/source.py", "prepare", "private.unlink"): (
        "the private copy of --source this call made in the build folder",
        f"{HERE}::test_a_source_archive_changed_since_the_plan_is_refused_and_kept"),
    ("olmo_doctor/commands/build_kernels.py", "_drop_work", "shutil.rmtree"): (
        "the build's own work folder in olmo-doctor's cache, after its wheel is stored (a link there: refused by "
        "rmtree, nothing followed)",
        f"{HERE}::test_a_linked_build_work_folder_loses_nothing"),
    ("olmo_doctor/fix/execute.py", "_restore_file", "path.unlink"): (
        "undo: a file the journaled run created (its record says it did not exist before)",
        "tests/doctor/test_fix_apply.py::test_env_set_unset_ulimit_applied_and_undone"),
    ("olmo_doctor/fix/execute.py", "_link_back", "tmp.unlink"): (
        "the hard link this call made under a fresh name, when the rename failed",
        f"{HERE}::test_link_back_never_removes_a_file_at_a_planted_temp_name"),
    ("olmo_doctor/fix/execute.py", "_link_back", "os.replace"): (
        "restores a file the journal backed up, at the path the journaled run changed",
        f"{HERE}::test_link_back_never_removes_a_file_at_a_planted_temp_name"),
    ("olmo_doctor/fix/journal.py", "check_writable", "os.unlink"): (
        "the probe file mkstemp made in this call",
        "tests/doctor/test_fix_cli.py::test_read_only_project_is_refused_and_nothing_changes"),
    ("olmo_doctor/fix/journal.py", "_empty", "os.unlink"): (
        "the files inside a journal entry folder this run created, reached through its pinned descriptor (a folder "
        "swapped for a symlink meanwhile is not followed)",
        "tests/security/test_attack_journal_state.py::test_a_state_folder_swapped_mid_run_does_not_redirect_writes"),
    ("olmo_doctor/fix/journal.py", "_empty", "shutil.rmtree"): (
        "subfolders (files/, logs/, wheels/) of a journal entry this run created, through its pinned descriptor",
        "tests/security/test_attack_journal_state.py::test_a_state_folder_swapped_mid_run_does_not_redirect_writes"),
    ("olmo_doctor/fix/journal.py", "remove", "os.rmdir"): (
        "the entry folder this run created, by name inside the pinned journal folder, only once empty",
        "tests/security/test_security_diskfull.py::test_no_room_for_the_journal_changes_nothing"),
    ("olmo_doctor/fix/journal.py", "remove", "shutil.rmtree"): (
        "an entry folder made a moment ago by this run when no pinned journal exists (mkdir fails on anything "
        "already there)",
        "tests/security/test_security_diskfull.py::test_no_room_for_the_journal_changes_nothing"),
    ("olmo_doctor/probes/paths.py", "problem", "os.unlink"): (
        "the probe file mkstemp made in this call (O_EXCL: a fresh name) in a cache folder it checks",
        "tests/doctor/test_machine_checks.py::test_a_writable_folder_passes_and_is_left_as_it_was"),
    ("olmo_doctor/probes/paths.py", "problem", "os.rmdir"): (
        "the empty folder mkdtemp made in this call (a fresh name) where a cache folder would be created",
        "tests/doctor/test_machine_checks.py::test_a_writable_folder_passes_and_is_left_as_it_was"),
    ("olmo_doctor/fix/wheelpack.py", "restore_install_files", "path.unlink"): (
        "an installer file (INSTALLER, REQUESTED, direct_url.json) the reinstall wrote where none was before",
        "tests/doctor/test_fix_apply.py::test_pip_uninstall_undone_with_editable_style_metadata"),
}


def _calls(source: str) -> list[tuple[str, str]]:
    """(enclosing function, call) for every call that deletes, renames or replaces: os/shutil functions and Path
    methods of those names. `x.replace(a, b)` (str) and `dataclasses.replace(x, ...)` are not file operations."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in KINDS:
                receiver, attr = ast.unparse(child.func.value), child.func.attr
                path_replace = receiver == "os" or (len(child.args) == 1 and not child.keywords)
                if not ((attr == "replace" and not path_replace) or (attr == "remove" and receiver != "os")
                        or (attr == "move" and receiver != "shutil")):
                    found.append((where, f"{receiver}.{attr}"))
            visit(child, inner)

    visit(ast.parse(source), "<module>")
    return found


def test_the_scanner_sees_every_spelling() -> None:
    src = ("import os, shutil\ndef f(p, q):\n    os.remove(p); shutil.rmtree(p); p.unlink(); os.replace(p, q)\n"
           "    p.rename(q); q.replace(p); shutil.move(p, q); p.rmdir()\n"
           "    'a'.replace('a', 'b'); dataclasses.replace(x, y=1); [].remove(1)\n")
    assert sorted(c for _, c in _calls(src)) == sorted(["os.remove", "shutil.rmtree", "p.unlink", "os.replace",
                                                        "p.rename", "q.replace", "shutil.move", "p.rmdir"])


def test_every_delete_and_replace_call_site_is_reviewed() -> None:
    seen = set()
    for top in ("olmo", "olmo_doctor", "olmo_common"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            seen |= {(rel, where, call) for where, call in _calls(path.read_text())}
    unreviewed = sorted(seen - AUDIT.keys())
    assert not unreviewed, f"review these against the rule, then list them in AUDIT with an attack test: {unreviewed}"
    assert not sorted(AUDIT.keys() - seen), f"listed in AUDIT but gone or moved: {sorted(AUDIT.keys() - seen)}"


def test_each_reviewed_site_names_a_test_that_exists() -> None:
    for site, (reason, test) in AUDIT.items():
        file, name = test.split("::")
        assert reason and f"def {name}(" in (ROOT / file).read_text(), f"{site}: no test {test}"


# ------------------------------------------------------------------------------------------------ attacks
def _outside(tmp_path: Path) -> Path:
    victim = tmp_path / "bashrc"
    victim.write_text("export PATH=/usr/bin\n")
    return victim


def test_atomic_write_never_touches_a_planted_temp_name(tmp_path: Path) -> None:
    """Every temp name an older version used, planted as links: none is followed, written or removed."""
    from olmo_common.atomic import atomic_write

    victim = _outside(tmp_path)
    folder = tmp_path / "f"
    folder.mkdir()
    planted = [folder / n for n in (".x.json.tmp", f".x.json.tmp{os.getpid()}", ".x.json.restore", ".x.tmp")]
    for p in planted:
        p.symlink_to(victim)
    atomic_write(folder / "x.json", b"{}")
    assert victim.read_text() == "export PATH=/usr/bin\n" and all(p.is_symlink() for p in planted)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*(p.name for p in planted), "x.json"])


def test_save_weights_never_replaces_an_existing_folder(tmp_path: Path) -> None:
    import torch

    from olmo import checkpoint

    mine = tmp_path / "ck"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious\n")
    with pytest.raises(OSError):
        checkpoint.save_weights(mine, {"w": torch.zeros(2)}, {"step": 0})
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_train_never_replaces_a_run_dirs_files_it_did_not_write(tmp_path: Path) -> None:
    """run_dir pointed at a project folder with its own config.yaml (or metrics.jsonl, or another tool's
    checkpoints/latest): `olmo train` wrote its config over it. Refused, bytes the same; a folder of other files
    only is fine (a run adds to it)."""
    from olmo import outputs
    from olmo.errors import OlmoError

    for name in ("config.yaml", "metrics.jsonl", "checkpoints/latest"):
        folder = tmp_path / name.replace("/", "_")
        (folder / name).parent.mkdir(parents=True)
        (folder / name).write_text("mine: true\n")
        with pytest.raises(OlmoError, match=f"holds {name}, which `olmo train` did not write"):
            outputs.check_run_dir(folder)
        assert (folder / name).read_text() == "mine: true\n"
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "README.md").write_text("mine\n")
    outputs.check_run_dir(tmp_path / "plain")
    for what, command in (("the output of `olmo export-hf`", "export-hf"),):
        (tmp_path / "hf").mkdir()
        outputs.write_marker(tmp_path / "hf", command)
        with pytest.raises(OlmoError, match=what.replace("`", ".")):
            outputs.check_run_dir(tmp_path / "hf")


def test_a_failed_prepare_keeps_a_file_the_user_dropped_in_meanwhile(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from olmo.data import prepare as P
    from olmo.data.corpus import CORPUS_PATH
    from olmo.errors import OlmoError

    real = P.ShardWriter.write
    out = tmp_path / "out"

    def write(self: P.ShardWriter, ids: object, docs: int) -> None:
        (out / "notes.txt").write_text("mine\n")  # the user saves a file there while the run goes
        raise OlmoError("bad data")

    monkeypatch.setattr(P.ShardWriter, "write", write)
    with pytest.raises(OlmoError):
        P.prepare(P.find_inputs([CORPUS_PATH]), out, P.load_tokenizer(Path("bundled")), 30_000, workers=1)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine\n"
    monkeypatch.setattr(P.ShardWriter, "write", real)


def test_releasing_a_lock_never_removes_a_file_put_in_its_place(tmp_path: Path) -> None:
    from olmo.lock import LOCK_NAME, DirLock

    lock = DirLock(tmp_path, "run_dir").acquire()
    os.unlink(tmp_path / LOCK_NAME)
    (tmp_path / LOCK_NAME).write_text("someone else's\n")
    lock.release()
    assert (tmp_path / LOCK_NAME).read_text() == "someone else's\n"


def _sdist(tmp_path: Path) -> Path:
    src = tmp_path / "pkg-1.0"
    src.mkdir()
    (src / "setup.py").write_text("print('hi')\n")
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(src, arcname="pkg-1.0")
    return sdist


def test_unpacking_never_extracts_through_a_planted_staging_link(tmp_path: Path) -> None:
    """`.unpack` (the staging folder's old fixed name) planted as a link to a folder elsewhere: the archive went
    there, and the cleanup followed it. Now a fresh staging folder is used and the link is left alone."""
    from olmo_doctor.build.source import _unpack

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".unpack").symlink_to(elsewhere)
    _unpack(_sdist(tmp_path), work / "src")
    assert (work / "src" / "setup.py").is_file()
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"] and (work / ".unpack").is_symlink()
    assert sorted(p.name for p in work.iterdir()) == [".unpack", "src"]


def test_a_linked_build_source_folder_loses_only_the_link(tmp_path: Path) -> None:
    from olmo_doctor.build import source
    from olmo_doctor.build.recipes import Recipe

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "src").symlink_to(elsewhere)
    sdist = _sdist(tmp_path)
    recipe = Recipe.__new__(Recipe)
    object.__setattr__(recipe, "subdir", "")
    object.__setattr__(recipe, "submodule_marker", "setup.py")
    object.__setattr__(recipe, "package", "pkg")
    source.prepare(recipe, str(sdist), work, "python")
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]
    assert (work / "src" / "setup.py").is_file() and not (work / "src").is_symlink()


def test_the_sdist_cache_copy_never_writes_through_a_planted_temp(tmp_path: Path) -> None:
    """`build-kernels --source pkg.tar.gz` copies the pinned sdist into the cache: through `NAME.part`, a fixed
    name, which a planted link turned into a write outside. Now a fresh temp name."""
    from olmo_doctor.commands.build_kernels import _cache_copy

    victim = _outside(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "pkg-1.0.tar.part").symlink_to(victim)
    sdist = _sdist(tmp_path)
    _cache_copy(sdist, cache / "pkg-1.0.tar.gz")
    assert victim.read_text() == "export PATH=/usr/bin\n"
    assert (cache / "pkg-1.0.tar.gz").read_bytes() == sdist.read_bytes()


def test_the_wheel_repack_never_writes_through_a_planted_temp(tmp_path: Path) -> None:
    """fix --apply repacks a package before replacing it, into `NAME.tmp` (a fixed name): a planted link got the
    zip written through it. Now a fresh temp name; the wheel is whole."""
    from olmo_doctor.fix.pyenv import Dist
    from olmo_doctor.fix.wheelpack import repack

    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nTag: py3-none-any\n")
    (info / "RECORD").write_text("pkg/__init__.py,,\npkg-1.0.dist-info/METADATA,,\npkg-1.0.dist-info/WHEEL,,\n"
                                 "pkg-1.0.dist-info/RECORD,,\n")
    out = tmp_path / "wheels"
    out.mkdir()
    victim = _outside(tmp_path)
    (out / "pkg-1.0-py3-none-any.tmp").symlink_to(victim)
    packed = repack(Dist("pkg", "1.0", str(info), str(site), None), str(tmp_path), out)
    assert packed is not None and victim.read_text() == "export PATH=/usr/bin\n"
    assert "pkg/__init__.py" in zipfile.ZipFile(packed.path).namelist()


def test_link_back_never_removes_a_file_at_a_planted_temp_name(tmp_path: Path) -> None:
    """Undo on a full disk links the backup into place through `.NAME.restore`, a fixed name: a file planted
    there was deleted first. Now a fresh name: the planted file stays."""
    from olmo_doctor.fix.execute import _link_back

    backup = tmp_path / "backup"
    backup.write_text("export A=1\n")
    target = tmp_path / "env.sh"
    target.write_text("export A=2\n")
    (tmp_path / ".env.sh.restore").write_text("someone else's\n")
    _link_back(backup, target, None)
    assert target.read_text() == "export A=1\n" and (tmp_path / ".env.sh.restore").read_text() == "someone else's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env.sh.restore", "backup", "env.sh"]


def test_a_linked_wheel_cache_entry_loses_only_the_link(tmp_path: Path) -> None:
    from build_cache_stand_ins import flash_attn_plan as _plan
    from build_cache_stand_ins import stand_in_wheel as _wheel

    from olmo_doctor.build import cache

    plan = _plan()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    entry = cache.entry_dir(plan, tmp_path / "root")
    entry.parent.mkdir(parents=True)
    entry.symlink_to(elsewhere)
    stored = cache.store(plan, _wheel(tmp_path), root=tmp_path / "root")
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"] and not entry.is_symlink() and stored.is_file()


def test_a_source_archive_changed_since_the_plan_is_refused_and_kept(tmp_path: Path) -> None:
    from olmo_doctor.build import source
    from olmo_doctor.build.recipes import Recipe
    from olmo_doctor.errors import UsageError

    sdist = _sdist(tmp_path)
    before = sdist.read_bytes()
    recipe = Recipe.__new__(Recipe)
    object.__setattr__(recipe, "subdir", "")
    object.__setattr__(recipe, "submodule_marker", "setup.py")
    object.__setattr__(recipe, "package", "pkg")
    work = tmp_path / "work"
    with pytest.raises(UsageError, match="changed since the plan"):
        source.prepare(recipe, str(sdist), work, "python", sha256="0" * 64)
    assert sdist.read_bytes() == before and sorted(p.name for p in work.iterdir()) == []


def test_a_linked_build_work_folder_loses_nothing(tmp_path: Path) -> None:
    from olmo_doctor.commands.build_kernels import _drop_work

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    (tmp_path / "work").symlink_to(elsewhere)
    _drop_work(tmp_path / "work")
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "obj.o").write_bytes(b"\0")
    _drop_work(tmp_path / "real")
    assert not (tmp_path / "real").exists()
