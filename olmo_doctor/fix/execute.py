"""Run a FixPlan, journal every change, roll back a run that fails part-way, and undo a journaled run.

A run is all or nothing: items run in plan order, and when one fails (or the user presses Ctrl-C) everything the
run already did is put back before we return. Before a pip or build step replaces or removes an installed
distribution it is repacked into the journal (wheelpack.py); before the env file is written its bytes are saved.
Undo is the same restore, after checks that change nothing: the entry is intact, it is the latest one still
applied, and nothing it touched has changed since (otherwise undo would overwrite the user's later work).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from olmo_common.atomic import atomic_write
from olmo_common.bounded.data import load_json
from olmo_common.bounded.files import sha256_file
from olmo_doctor import __version__
from olmo_doctor.errors import UsageError
from olmo_doctor.fix import journal_key, pyenv, safety, wheelpack
from olmo_doctor.fix.journal import Entry, Journal, JournalError, check_writable
from olmo_doctor.fix.plan import FixPlan, PlanItem

Echo = Callable[[str], None]
DONE = ("undone", "rolled_back")  # entries with nothing left to undo


class StepFailed(Exception):
    def __init__(self, item: PlanItem, code: int, output: str):
        tail = "\n".join(output.strip().splitlines()[-15:])
        super().__init__(f"{item.description} failed (exit {code})" + (f":\n{tail}" if tail else ""))
        self.item = item


def _dists(env: pyenv.PyEnv) -> dict[str, list[str | None]]:
    """name -> [version, direct_url.json text]: the two things `pip freeze` prints for a distribution."""
    return {k: [d.version, d.direct_url] for k, d in env.dists.items()}


def _snapshot(py: str) -> dict[str, list[str | None]]:
    return _dists(pyenv.query(py))


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is not None and new is not None:
            out.append(f"{name} {old[0]} -> {new[0]}")
        elif new is not None:
            out.append(f"+{name} {new[0]}")
        elif old is not None:
            out.append(f"-{name} {old[0]}")
    return out


def refuse_held_back(plan: FixPlan) -> None:
    """pip fixes held back because the target is not a venv: refuse the whole run rather than half of it."""
    held = [i for i in plan.items if i.status == "needs_venv"]
    if held:
        raise UsageError(f"no virtual environment: {held[0].reason} ({len(held)} pip change(s) held back)")


def preflight(plan: FixPlan, project: Path, journal: Journal) -> None:
    """Every refusal, before anything is written: one clear line (UsageError, exit 2), nothing changed."""
    if plan.from_report:
        raise UsageError("--from-report plans a dry run for another machine; run `olmo-doctor fix --apply` there")
    refuse_held_back(plan)
    check_writable(project)
    journal_key.sign(b"")  # the key the journal is signed with must be usable before anything is written
    for entry_id in journal.ids():
        entry = journal.load(entry_id, verify=False)  # manifests only: hashing every saved torch wheel is slow
        if entry.status == "in_progress":
            raise JournalError(f"journal entry {entry_id} did not finish (interrupted?); run `olmo-doctor fix "
                               f"--undo {entry_id}` first")


def _open_entry(plan: FixPlan, project: Path, journal: Journal, cli_argv: list[str]
                ) -> tuple[Entry, pyenv.PyEnv | None, str | None]:
    """The run's journal entry, with the environment as it was before (None: nothing pip-related can run)."""
    py = plan.python if plan.env_kind else None
    env = pyenv.query(py) if py else None
    if env is None or not env.has_pip:
        py = env = None  # nothing pip-related can run (the planner blocked it): record no freeze
    freeze = pyenv.freeze(py) if py else None  # before the entry exists: a failure here leaves no trace
    entry = journal.create({
        "olmo_doctor_version": __version__, "project": str(project), "python": py, "argv": cli_argv,
        "plan": [i.to_json() for i in plan.to_run],
        "findings_before": [f["code"] for f in plan.findings],
        "freeze_before": freeze, "dists_before": _dists(env) if env else None,
    })
    return entry, env, py


def apply_plan(plan: FixPlan, project: Path, cli_argv: list[str], echo: Echo | None = None,
               progress: Callable[[PlanItem], None] | None = None) -> Entry:
    """Run every `apply` item of the plan; returns the journal entry (status applied, or rolled_back).
    `echo` gets each output line of the commands, `progress` each item as it starts."""
    journal = Journal(project)
    preflight(plan, project, journal)
    with journal.lock():
        entry, env, py = _open_entry(plan, project, journal, cli_argv)
        try:
            for item in plan.to_run:
                if progress is not None:
                    progress(item)
                env = _run_item(item, entry, project, env, echo)
        except BaseException as e:  # a failed step, a full disk, Ctrl-C: put back what this run did
            _roll_back(entry, project, py, echo, e)
            if not isinstance(e, (StepFailed, OSError)):
                raise
            return entry
        if py and env:
            entry.data["freeze_after"] = pyenv.freeze(py)
            entry.data["dists_after"] = _dists(env)
        entry.data["status"] = "applied"
        entry.save()
        return entry


def _error_text(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" writing {e.filename}" if e.filename else ""
        return f"no space left on device{where}; everything this run wrote was put back"
    return str(e) or type(e).__name__


def _roll_back(entry: Entry, project: Path, py: str | None, echo: Echo | None, e: BaseException) -> None:
    """Put back what the run did and record it. On a full disk the journal itself may not be writable: a run
    whose rollback left nothing changed then removes its entry, so `fix --undo` finds nothing to undo."""
    entry.data["error"] = _error_text(e)
    try:
        entry.save()
    except OSError:
        pass  # the rollback does not need it; its own save below says how it ended
    try:
        _restore(entry, project, py, echo, phase="rollback")
    except Exception as again:
        entry.data["status"] = "rollback_incomplete"
        entry.data["rollback_problems"] = [f"rollback stopped: {again}"]
        try:
            _save(entry)
        except OSError:
            pass  # the manifest on disk still says in_progress, so `fix --undo` finishes the job later


def _save(entry: Entry) -> None:
    """Save the manifest; when the disk is full and the entry has nothing left to undo, drop the entry instead."""
    try:
        entry.save()
    except OSError:
        if entry.status not in DONE:
            raise
        entry.remove()


def _write_env_file(item: PlanItem, entry: Entry, step: dict[str, Any]) -> None:
    assert item.path is not None and item.content is not None
    # every folder on the way pinned (no symlink followed, none swappable before the write); the file itself
    # is refused when it is a symlink, a FIFO or hard-linked, and replaced by rename, never written through
    assert entry.journal is not None
    path = entry.journal.project_file(item.path, entry.id, create=True)
    record = entry.back_up_file(path, item.path)
    atomic_write(path, item.content.encode(), mode=record.get("mode", 0o644))
    record["sha256_after"] = sha256_file(path)
    step.update(ok=True, returncode=0, wrote=item.path)
    entry.data["steps"].append(step)
    entry.save()


def _run_item(item: PlanItem, entry: Entry, project: Path, env: pyenv.PyEnv | None,
              echo: Echo | None) -> pyenv.PyEnv | None:
    """Run one item; returns the environment as it is afterwards (queried once per pip step)."""
    step: dict[str, Any] = {"item": item.id, "op": item.op, "codes": item.codes, "started": time.time()}
    if item.op == "write_env_file":
        _write_env_file(item, entry, step)
        return env
    assert item.argv is not None and env is not None
    _back_up_dists(item, entry, env)
    step["argv"] = item.argv
    entry.data["steps"].append(step)
    entry.save()  # the command is on record before it runs, so an interrupted run can be undone
    code, output = pyenv.run(item.argv, echo)
    after = pyenv.query(env.python)
    step["log"], step["log_sha256"] = entry.add_log(output)
    step.update(returncode=code, ok=code == 0, elapsed_s=round(time.time() - step.pop("started"), 2),
                changes=_changes(_dists(env), _dists(after)))
    entry.save()
    if code != 0:
        raise StepFailed(item, code, output)
    return after


def _back_up_dists(item: PlanItem, entry: Entry, env: pyenv.PyEnv) -> None:
    """Repack each installed distribution this step may replace or remove, once, in its state before the run."""
    names = list(item.backup)
    if item.op in ("pip_install", "reinstall_torch"):
        names += _would_install(item.argv or [])
    saved = {w["name"] for w in entry.data["wheels"]}
    for name in dict.fromkeys(names):
        dist = env.dists.get(name)
        original = (entry.data["dists_before"] or {}).get(name)
        if dist is None or name in saved or original != [dist.version, dist.direct_url]:
            continue  # not installed, already saved, or installed by this run (undo removes it)
        _back_up_dist(entry, env, name, dist)
    entry.save()


def _back_up_dist(entry: Entry, env: pyenv.PyEnv, name: str, dist: Any) -> None:
    packed = wheelpack.repack(dist, env.prefix, entry.folder / "wheels")
    if packed is None:
        entry.data.setdefault("notes", []).append(f"{name} {dist.version} could not be repacked; undo "
                                                  f"reinstalls it from the package index")
        return
    entry.data["wheels"].append({"name": name, "version": dist.version, "file": f"wheels/{packed.path.name}",
                                 "sha256": sha256_file(packed.path), "extras": packed.extras})


def _would_install(argv: list[str]) -> list[str]:
    """What pip would install for this command (`pip install --dry-run --report`), as canonical names."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        at = argv.index("install") + 1 if "install" in argv else len(argv)
        code, _ = pyenv.run([*argv[:at], "--dry-run", "--quiet", "--report", report, *argv[at:]])
        if code != 0 or not os.path.exists(report):
            return []  # the real command will fail the same way and say why
        try:
            data = load_json(report, "build state")
        except (OSError, ValueError, RecursionError):
            return []  # as above: the real command says what is wrong
    from packaging.utils import canonicalize_name

    return [str(canonicalize_name(i["metadata"]["name"])) for i in data.get("install", [])]


def _restore_file(entry: Entry, record: dict[str, Any]) -> str | None:
    """Put one file the run wrote back as it was (or remove it, when the run created it); a problem, or None."""
    assert entry.journal is not None
    path = entry.journal.project_file(record["path"], entry.id, create=True)
    current = sha256_file(path) if path.is_file() else None
    if not record["existed"]:
        if os.path.lexists(path):
            path.unlink()
        return None
    if current == record["sha256_before"]:
        return None  # never changed (a write that failed), or already put back: nothing to write
    data = entry.read_backup(record["backup"], record["sha256_before"])
    try:
        atomic_write(path, data, mode=record.get("mode"))
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        # a full disk: link the backup's blocks into place, which needs no new ones
        _link_back(entry.folder / record["backup"], path, record.get("mode"))
    if sha256_file(path) != record["sha256_before"]:
        return f"{record['path']} could not be restored"
    return None


def _freeze_problems(entry: Entry, py: str, phase: str) -> list[str]:
    """Whether `pip freeze` is back to what it was before the run (recorded in the entry)."""
    now = pyenv.freeze(py)
    entry.data[f"freeze_after_{phase}"] = now
    if now == entry.data["freeze_before"]:
        return []
    diff = sorted(set(now) ^ set(entry.data["freeze_before"]))
    return ["pip freeze differs from before the run: " + ", ".join(diff[:6])]


def _restore(entry: Entry, project: Path, py: str | None, echo: Echo | None, phase: str) -> None:
    """Put packages and files back as they were before the entry's run; record whether it worked.
    `py` is the running interpreter (checked against the entry first), never one the journal names."""
    problems: list[str] = []
    if py and entry.data.get("python") and entry.data.get("dists_before") is not None:
        problems += _reconcile(entry, py, echo)
    for record in reversed(entry.data["files"]):
        if (problem := _restore_file(entry, record)) is not None:
            problems.append(problem)
    if py and entry.data.get("freeze_before") is not None:
        problems += _freeze_problems(entry, py, phase)
    entry.data[f"{phase}_problems"] = problems
    ok_status = {"rollback": "rolled_back", "undo": "undone"}[phase]
    entry.data["status"] = f"{phase}_incomplete" if problems else ok_status
    entry.data[f"{phase}_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    _save(entry)


def _link_back(backup: Path, path: Path, mode: int | None) -> None:
    """Put a backup in place by hard link and rename: needs no free blocks. Later rewrites of the file replace it
    (atomic_write renames), so the journal's copy is not changed through the link."""
    tmp = _link_fresh(backup, path.parent, f".{path.name}.restore-")
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the link this call made
        raise


def _link_fresh(source: Path, folder: Path, prefix: str) -> Path:
    """A new hard link to `source` in `folder` under a fresh name (os.link refuses an existing one, so nothing
    planted at a name is ever removed or replaced)."""
    import secrets

    for _ in range(100):
        tmp = folder / f"{prefix}{secrets.token_hex(4)}"
        try:
            os.link(source, tmp)
            return tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temp name", str(folder))


def _touched(entry: Entry, py: str) -> list[str]:
    """The distributions to put back: those the run changed (a finished run: only what it recorded changing,
    never everything a bad `before` leaves out); refused when that would change pip itself."""
    before: dict[str, Any] = entry.data["dists_before"]
    current = _snapshot(py)
    touched = [n for n in sorted(set(before) | set(current)) if before.get(n) != current.get(n)]
    after = entry.data.get("dists_after")
    if after is not None:
        touched = [n for n in touched if before.get(n) != after.get(n)]
    if "pip" in touched:
        raise JournalError(f"journal entry {entry.id} would change pip itself; refusing (undo needs it)")
    return touched


class _Pip:
    """The pip commands of one restore, each logged in the entry's restore_steps."""

    def __init__(self, entry: Entry, py: str, echo: Echo | None) -> None:
        self.entry, self.py, self.echo = entry, py, echo
        self.log: list[dict[str, Any]] = entry.data.setdefault("restore_steps", [])

    def run(self, *args: str) -> bool:
        argv = pyenv.pip_argv(self.py, *args)
        code, output = pyenv.run(argv, self.echo)
        self.log.append({"argv": argv, "returncode": code, "output_tail": output[-2000:]})
        self.entry.save()
        return code == 0


def _reinstall_saved(entry: Entry, pip: _Pip, name: str, wheel: dict[str, Any]) -> bool:
    """Reinstall a distribution from the wheel the run saved of it, install files (INSTALLER, ...) as they were."""
    saved = safety.member(entry.folder, wheel["file"], entry.id, entry.shown)
    with tempfile.TemporaryDirectory(prefix="olmo-doctor-undo-") as private:
        # pip gets a private copy, checked as it is used: the bytes checked are the bytes installed, and
        # the path means the same file in pip's process (the journal's own path is this process's pin)
        copy = Path(private) / saved.name
        shutil.copyfile(saved, copy)
        if sha256_file(copy) != wheel["sha256"]:
            raise JournalError(f"journal entry {entry.id}: {wheel['file']} changed since it was written")
        ok = pip.run("install", "--no-deps", "--force-reinstall", "--no-index", str(copy))
    dist = pyenv.query(pip.py).dists.get(name) if ok else None
    if dist is not None:
        wheelpack.restore_install_files(dist, wheel["extras"])
    return ok


def _reconcile(entry: Entry, py: str, echo: Echo | None) -> list[str]:
    """Uninstall what the run added and reinstall what it replaced or removed, from the saved wheels."""
    before: dict[str, Any] = entry.data["dists_before"]
    touched = _touched(entry, py)
    pip = _Pip(entry, py, echo)
    added = [n for n in touched if n not in before]
    problems: list[str] = []
    if added and not pip.run("uninstall", "--yes", *added):
        problems.append(f"could not uninstall {', '.join(added)}")
    wheels = {w["name"]: w for w in entry.data["wheels"]}
    for name in (n for n in touched if n in before):
        version = before[name][0]
        if not _put_back(entry, pip, name, version, wheels.get(name)):
            problems.append(f"could not reinstall {name} {version}")
    return problems


def _put_back(entry: Entry, pip: _Pip, name: str, version: str, wheel: dict[str, Any] | None) -> bool:
    """Reinstall one distribution as it was: from the wheel saved before the run, else from the index."""
    if wheel and wheel["version"] == version:
        return _reinstall_saved(entry, pip, name, wheel)
    # not repackable (an egg, files outside the venv): the index is all we have
    return pip.run("install", "--no-deps", "--force-reinstall", f"{name}=={version}")


def _no_newer_applied(entry: Entry, journal: Journal) -> None:
    if entry.status in DONE:
        raise JournalError(f"journal entry {entry.id} is already {entry.status.replace('_', ' ')}; nothing to undo")
    later = [i for i in journal.ids() if int(i.split("-", 1)[0]) > int(entry.id.split("-", 1)[0])]
    for other in later:
        if journal.load(other, verify=False).status not in DONE:
            raise JournalError(f"journal entry {other} is newer and still applied; undo it first "
                               f"(olmo-doctor fix --undo {other})")


def _files_unchanged(entry: Entry, journal: Journal) -> None:
    """Each file the run wrote still holds what it wrote (or, for a run that did not finish, what was there)."""
    in_progress = entry.status != "applied"  # interrupted or half rolled back: files may be in either state
    for record in entry.data["files"]:
        path = journal.project_file(record["path"], entry.id)
        now = sha256_file(path) if path.is_file() else None
        allowed = {record.get("sha256_after")} | ({record.get("sha256_before")} if in_progress else set())
        if now not in allowed:
            raise JournalError(f"{record['path']} changed after fix {entry.id} wrote it; undo would overwrite "
                               "your edits (restore or move it first)")


def _packages_unchanged(entry: Entry, py: str) -> None:
    """Each distribution the run changed is still as the run left it."""
    now_d, after, before = _snapshot(py), entry.data["dists_after"], entry.data["dists_before"]
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name) and now_d.get(name) != after.get(name):
            have = (now_d.get(name) or ["not installed"])[0]
            raise JournalError(f"{name} changed after fix {entry.id} (now {have}, the fix left "
                               f"{(after.get(name) or ['it uninstalled'])[0]}); undo would overwrite that")


def undo_checks(entry: Entry, journal: Journal, project: Path) -> None:
    """Refuse (exit 2, nothing changed) an undo that cannot restore exactly or would clobber later changes."""
    _no_newer_applied(entry, journal)
    check_writable(project)
    _files_unchanged(entry, journal)
    recorded = entry.data.get("python")
    if recorded and not same_python(recorded, pyenv.target_python()):
        raise JournalError(f"fix {entry.id} changed the Python at {recorded}, not the one running olmo-doctor "
                           f"({pyenv.target_python()}); run `olmo-doctor fix --undo` from that environment")
    if recorded and entry.data.get("dists_after") is not None:
        _packages_unchanged(entry, pyenv.target_python())


def same_python(recorded: str, running: str) -> bool:
    """The journal's interpreter is the running one (paths compared as written: venvs share a symlinked binary)."""
    return os.path.abspath(recorded) == os.path.abspath(running)


def undo(entry: Entry, journal: Journal, project: Path, echo: Echo | None = None) -> Entry:
    undo_checks(entry, journal, project)
    with journal.lock():
        _restore(entry, project, pyenv.target_python() if entry.data.get("python") else None, echo, phase="undo")
    return entry
