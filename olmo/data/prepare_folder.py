"""prepare-data's output folder: its job record, what a killed run leaves in it, and taking back what a failed
run added. Which folders prepare-data may write at all is olmo/outputs.py's rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from olmo import outputs
from olmo.data.shards import MANIFEST
from olmo.lock import LOCK_NAME
from olmo_common.bounded.data import load_json

JOB_FILE = "prepare.json"


def read_job(out: Path) -> dict[str, Any] | None:
    """The job prepare.json describes; None when there is none or it is not one (then it is another job's)."""
    try:
        job = load_json(out / JOB_FILE, "prepare job")
    except (OSError, ValueError, RecursionError):
        return None
    return job if isinstance(job, dict) else None


def stale_temps(out: Path) -> list[Path]:
    """Temp files (olmo_common/atomic.py's, and older versions') a killed run left in its own output folder."""
    return [p for pat in (".part-*.tmp*", f".{MANIFEST}.*tmp*", f".{JOB_FILE}.*tmp*") for p in out.glob(pat)]


def has_outputs(out: Path) -> bool:
    """Whether `out` holds shards or a manifest (of whichever job)."""
    return any(out.glob("part-*")) or (out / MANIFEST).exists()


def roll_back(out: Path, before: set[str]) -> None:
    """Remove what this run added to `out`: new files of prepare-data's own names (never anything that was there
    before it, nor a file someone else put there meanwhile)."""
    for p in out.iterdir():
        if p.name not in before and p.name != LOCK_NAME and outputs.writes("prepare-data", p.name) and \
                p.is_file() and not p.is_symlink():
            p.unlink(missing_ok=True)
