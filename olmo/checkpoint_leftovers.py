"""What a killed `olmo train` save leaves in `run_dir/checkpoints/`, found by exact name and removed at the next save.

A save writes `step<N>-tmp/` and renames it to `step<N>/`; a purge renames a checkpoint onto mkdtemp's
`step<N>-deleting-XXXXXXXX/` before deleting it; the `latest` pointer is replaced through `.latest.XXXXXXXX.tmp`
(mkstemp). A SIGKILL between those steps leaves them behind. Only those exact names, of the kind olmo makes there
(folders of plain files, a plain file), are olmo's to delete: anything else that merely looks like one (a user's
`step3-tmp.tar.gz`, a symlink) is kept, or refused in one line when it sits at one of those names.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from olmo.errors import OlmoError

LATEST = "latest"  # the pointer file naming the newest complete checkpoint (olmo/checkpoint.py)

# (step-NNNNNN and a bare step<N>-deleting: older olmo versions' names)
_LEFTOVER_DIR = re.compile(r"^step-?\d+-(?:tmp|deleting(?:-[a-z0-9_]{8})?)$")
_LEFTOVER_FILE = re.compile(rf"^\.{LATEST}\.[a-z0-9_]{{8}}\.tmp$")


def leftovers(root: Path) -> list[Path]:
    """What a killed save or purge leaves in checkpoints/: `step<N>-tmp` and `step<N>-deleting-XXXXXXXX` folders
    of plain files, `.latest.XXXXXXXX.tmp` files, by their exact names. OlmoError when one of those names is not
    what olmo makes there (a symlink, a file for a folder, a folder holding folders or links): olmo deletes only
    what it made, and following a link would delete (or write into) wherever it points."""
    found = [p for p in root.iterdir() if _LEFTOVER_DIR.match(p.name) or _LEFTOVER_FILE.match(p.name)]
    for p in found:
        if p.is_symlink():
            raise OlmoError(f"{p} is a symlink where olmo keeps an unfinished checkpoint of its own; olmo never "
                            "follows or deletes a link it did not make: remove the link, then run again")
        wanted_dir = bool(_LEFTOVER_DIR.match(p.name))
        if p.is_dir() != wanted_dir or (wanted_dir and any(not e.is_file() or e.is_symlink() for e in p.iterdir())):
            raise OlmoError(f"{p} has the name of an unfinished olmo checkpoint but is not one (olmo leaves "
                            f"{'a folder of plain files' if wanted_dir else 'a plain file'} there); olmo deletes "
                            "only what it made: move it out of checkpoints/, then run again")
    return found


def remove_leftovers(root: Path) -> None:
    """Delete the leftovers of a killed save (see `leftovers`). Only one run (rank 0 of it) saves into a run_dir
    at a time, so anything unfinished here is dead, and it is this run_dir's own."""
    for p in leftovers(root):
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
