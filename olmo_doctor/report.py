"""Facts from another machine: a pasted `python -m torch.utils.collect_env` output, a saved `olmo-doctor report`
(JSON), raw tool captures (`env.txt`, `torch.txt`: the format reports/capture.py reads), or a folder holding them.

Files captured together in one folder are combined (collect_env first, the raw tool outputs override it), so
`--from-report capture/collect_env.txt` also learns the RAM and ulimits that collect_env does not print. Facts a
report does not contain stay None, and rules that need them stay quiet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from olmo_doctor import tables
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, merge
from olmo_doctor.reports import capture, collect_env

REPORT_MARK = "olmo_doctor_report"
SIBLINGS = ("collect_env.txt", "env.txt", "torch.txt")
_HINT = ("give a `python -m torch.utils.collect_env` output (run it on that machine and save it to a file), or an "
         "`olmo-doctor report -o FILE` file")


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read report {path}: {e.strerror or e}") from None
    if not data.strip():
        raise UsageError(f"report {path} is empty; {_HINT}")
    if data.count(b"\0") > len(data) // 100:
        raise UsageError(f"report {path} is binary, not a report; {_HINT}")
    return data.decode("utf-8", errors="replace")


def parse_text(text: str) -> Facts:
    """Facts from any supported text format (format detected from its content)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("facts"), dict):
            return dict(data["facts"])
        return {}
    if capture.looks_like(text):
        return capture.parse(text)
    if collect_env.looks_like(text):
        return collect_env.parse(text)
    return {}


def _finish(facts: Facts) -> Facts:
    """Derive what a report implies but does not print (compute capability from GPU names, ...)."""
    count = facts.get("gpu.count")
    for i in range(count if isinstance(count, int) else 0):
        if not facts.get(f"gpu.{i}.compute_capability"):
            facts[f"gpu.{i}.compute_capability"] = tables.gpu_name_to_cc(facts.get(f"gpu.{i}.name"))
    drv = tables.parse_version(facts.get("driver.version"))
    if drv is not None and not facts.get("driver.cuda_version"):
        # the newest CUDA whose GA driver floor this driver meets is what nvidia-smi would print
        ok = [c for c, floor in tables.DRIVER_FLOOR_LINUX.items() if drv >= tables.parse_version(floor)]  # type: ignore[operator]
        facts["driver.cuda_version"] = max(ok, key=lambda c: tables.major_minor(c) or (0, 0)) if ok else None
    nvcc = facts.get("nvcc.version")
    if nvcc and not facts.get("nvcc.max_gcc"):
        facts["nvcc.max_gcc"] = tables.nvcc_max_gcc(nvcc)
    facts.setdefault("gpu.source", "report")
    return facts


def load_report(path: str | Path) -> Facts:
    """Facts of the machine a report describes; UsageError (exit 2) when it is not a report."""
    p = Path(path)
    if p.is_dir():
        files = [p / n for n in SIBLINGS if (p / n).is_file()] + sorted(p.glob("*.json"))
        if not files:
            raise UsageError(f"folder {p} holds no report files ({', '.join(SIBLINGS)}, *.json); {_HINT}")
    elif p.exists():
        files = [p]
        if p.name in SIBLINGS:  # a capture folder: read the files taken alongside it as well
            files = [p.parent / n for n in SIBLINGS if (p.parent / n).is_file()]
    else:
        raise UsageError(f"report {p} does not exist; {_HINT}")
    parts = [parse_text(_read_text(f)) for f in files]
    facts = merge(*parts)
    if sum(v is not None for v in facts.values()) < 3:
        raise UsageError(f"{p} is not a report olmo-doctor can read; {_HINT}")
    return _finish(facts)


def redact(text: str, home: str, user: str) -> str:
    """Hide the user's name and home folder in a shared report."""
    if home and home != "/":
        text = text.replace(home, "~")
    if user and len(user) > 2:
        text = re.sub(rf"\b{re.escape(user)}\b", "<user>", text)
    return text
