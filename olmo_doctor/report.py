"""Facts from another machine: a pasted `python -m torch.utils.collect_env` output, a saved `olmo-doctor report`
(JSON), raw tool captures (`env.txt` with "== section" blocks, `torch.txt`), a folder holding them, or a few
hand-written lines (`torch 2.4.0+cu121, driver 535.104, RTX 4090`, the nvidia-smi header: reports/freeform.py);
pasted text is unwrapped first (reports/paste.py).

Files captured together in one folder are combined (collect_env first, the raw tool outputs override it), so
`--from-report capture/collect_env.txt` also learns the RAM and ulimits that collect_env does not print. Facts a
report does not state are left out and the result is marked `facts.partial`, so they read as unknown (`?`), not as
absent, and rules that need them stay quiet. A value no machine could have is refused (reports/sanity.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from olmo_doctor import tables
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, FactValue, clean, merge
from olmo_doctor.redact import redact
from olmo_doctor.reports import capture, collect_env, encoding, freeform, paste, sanity

__all__ = ["REPORT_MARK", "load_report", "parse_text", "redact"]

REPORT_MARK = "olmo_doctor_report"
SIBLINGS = ("collect_env.txt", "env.txt", "torch.txt")
_HINT = ("give the output of `python -m torch.utils.collect_env`, a file written by `olmo-doctor report -o FILE`, "
         "or a folder of raw captures (env.txt, torch.txt)")


MAX_BYTES = 16 * 1024 * 1024  # a collect_env output is ~10 KB; even with logs pasted below it, far less than this


def _read_text(path: Path) -> str:
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with open(path, "rb") as fh:  # bounded: a FIFO or /dev/zero must not hang or fill memory
                data = fh.read(MAX_BYTES + 1)
    except OSError as e:
        raise UsageError(f"cannot read report {path}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"report {path} is over {MAX_BYTES // 2**20} MB; give only the collect_env or report part")
    text = _decode(data)
    if not text.strip():
        raise UsageError(f"report {path} is empty; {_HINT}")
    if text.count("\0") > len(text) // 100:
        raise UsageError(f"report {path} is binary, not a report; {_HINT}")
    return text


def _decode(data: bytes) -> str:
    return encoding.decode(data)


def _json_facts(data: object) -> Facts:
    """Facts of a saved report; keys it lists as unknown are left out so they stay unknown here too."""
    if not isinstance(data, dict) or not isinstance(data.get("facts"), dict):
        return {}
    listed = data.get("unknown")
    unknown = set(listed) if isinstance(listed, list) and all(isinstance(k, str) for k in listed) else set()
    facts: Facts = {}
    for key, value in data["facts"].items():
        if not isinstance(key, str) or key in unknown:
            continue
        if not _is_fact_value(value):
            raise UsageError(f"{key} in the report is a {type(value).__name__}, not a fact value; "
                             "give the file `olmo-doctor report -o FILE` wrote")
        facts[key] = value
    return facts


def _is_fact_value(value: object) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def parse_text(text: str) -> Facts:
    """Facts from any supported text format (format detected from its content), however it was pasted."""
    stripped = text.lstrip().lstrip("\ufeff")
    if stripped.startswith("{"):
        try:
            return _json_facts(json.loads(stripped))
        except (ValueError, RecursionError):
            pass
    text = paste.unwrap_text(text)
    start, end = re.search(r"^\{", text, re.M), text.rfind("}")
    if start and end > start.start() and "\"facts\"" in text:  # a saved report pasted with prose around it
        try:
            return _json_facts(json.loads(text[start.start() : end + 1]))
        except (ValueError, RecursionError):
            return {}
    if capture.looks_like(text):
        return capture.parse(text)
    if collect_env.looks_like(text):
        return collect_env.parse(text)
    # a few hand-written lines (a version, a GPU, the nvidia-smi header): partial facts, the rest stays unknown
    return freeform.parse(text)


def _finish(facts: Facts) -> Facts:
    """Derive what a report implies but does not print (compute capability from GPU names, ...)."""
    count = facts.get("gpu.count")
    for i in range(count if isinstance(count, int) and 0 < count <= 256 else 0):
        if not facts.get(f"gpu.{i}.compute_capability"):
            name = facts.get(f"gpu.{i}.name")
            cc = tables.gpu_name_to_cc(name) or (tables.gpu_name_to_cc(collect_env.expand_shorthand(name))
                                                 if isinstance(name, str) else None)
            _set_known(facts, f"gpu.{i}.compute_capability", cc)
    drv = tables.parse_version(facts.get("driver.version"))
    if drv is not None and not facts.get("driver.cuda_version"):
        # the newest CUDA whose GA driver floor this driver meets is what nvidia-smi would print
        ok = [c for c, floor in tables.DRIVER_FLOOR_LINUX.items() if drv >= tables.parse_version(floor)]  # type: ignore[operator]
        _set_known(facts, "driver.cuda_version", max(ok, key=lambda c: tables.major_minor(c) or (0, 0)) if ok else None)
    torch = facts.get("torch.version")
    if isinstance(torch, str) and "torch.cuda" not in facts:
        # a wheel's local tag says what it was built for: +cu121 is CUDA 12.1, +cpu and +rocm are no CUDA
        if m := re.search(r"\+cu(\d{1,2})(\d)$", torch):
            facts["torch.cuda"] = f"{int(m.group(1))}.{m.group(2)}"
        elif re.search(r"\+(cpu|rocm[\d.]*)$", torch):
            facts["torch.cuda"] = None
    nvcc = facts.get("nvcc.version")
    if nvcc and not facts.get("nvcc.max_gcc"):
        _set_known(facts, "nvcc.max_gcc", tables.nvcc_max_gcc(nvcc))
    facts.setdefault("gpu.source", "report")
    facts["facts.partial"] = True
    return facts


def _set_known(facts: Facts, key: str, value: FactValue) -> None:
    # a derivation that finds nothing leaves the fact unknown rather than stating it absent
    if value is not None:
        facts[key] = value


def facts_in_log(path: Path, limit: int = 1 << 20) -> Facts:
    """Facts of a collect_env report pasted inside a failure log (a GitHub issue's "Versions" section next to its
    traceback); {} when the log holds none, is larger than `limit`, or states something impossible."""
    try:
        if not path.is_file() or path.stat().st_size > limit:
            return {}
        with open(path, "rb") as fh:
            text = _decode(fh.read(limit))
    except OSError:
        return {}
    if not collect_env.looks_like(text):
        return {}
    facts = collect_env.parse(text)
    try:
        sanity.check(facts)
    except UsageError:
        return {}  # a mangled report must not steer the ranking
    return clean(_finish(facts)) if sum(v is not None for v in facts.values()) >= 2 else {}


def load_report(path: str | Path) -> Facts:
    """Facts of the machine a report describes; UsageError (exit 2) when it is not a report."""
    p = Path(path)
    if str(p) == "-":  # pasted into the terminal or piped: `pbpaste | olmo-doctor check --from-report -`
        files = [p]
    elif p.is_dir():
        files = [p / n for n in SIBLINGS if (p / n).is_file()] + sorted(p.glob("*.json"))
        if not files:
            raise UsageError(f"folder {p} holds no report files ({', '.join(SIBLINGS)}, *.json); {_HINT}")
    elif p.exists():
        files = [p]
        if p.name in SIBLINGS:  # a capture folder: read the files taken alongside it as well
            files = [p.parent / n for n in SIBLINGS if (p.parent / n).is_file()]
    else:
        raise UsageError(f"report {p} does not exist; {_HINT}")
    texts = [(f, _read_text(f)) for f in files]
    try:
        facts = merge(*[parse_text(text) for _, text in texts])
        sanity.check(facts)
    except UsageError as e:  # name the file: the message itself names the value
        raise UsageError(f"report {p}: {e}") from None
    several = max((collect_env.report_count(text) for _, text in texts if collect_env.looks_like(text)), default=1)
    if several > 1:  # a note, not a refusal: the first machine is still judged
        print(f"olmo-doctor: {p} holds {several} collect_env reports; judging the first only "
              "(give each machine's report on its own)", file=sys.stderr)
    if not any(v is not None for k, v in facts.items() if k != "gpu.source"):  # one stated fact is a partial report
        raise UsageError(f"{p} is not a report olmo-doctor can read; {_HINT}")
    return clean(_finish(facts))

