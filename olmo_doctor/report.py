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

import errno
import re
import sys
from pathlib import Path

from olmo_common.bounded.data import parse_json, shown
from olmo_common.bounded.files import CAPS, ReadRefused, read_bytes
from olmo_doctor.compat.drivers import newest_cuda_for_driver
from olmo_doctor.compat.gpus import name_to_cc
from olmo_doctor.compat.nvcc import nvcc_max_gcc
from olmo_doctor.compat.release import release
from olmo_doctor.errors import UsageError
from olmo_doctor.facts import Facts, FactValue, clean, merge
from olmo_doctor.redact import redact
from olmo_doctor.reports import accept, capture, collect_env, encoding, freeform, paste, sanity
from olmo_doctor.reports.observe import Source, Sources, agreeing

__all__ = ["REPORT_FORMAT", "REPORT_MARK", "load_report", "parse_text", "read_report", "redact"]

REPORT_MARK = "olmo_doctor_report"
REPORT_FORMAT = accept.REPORT_FORMAT
SIBLINGS = ("collect_env.txt", "env.txt", "torch.txt")
_HINT = ("give the output of `python -m torch.utils.collect_env`, a file written by `olmo-doctor report -o FILE`, "
         "or a folder of raw captures (env.txt, torch.txt)")


MAX_BYTES = CAPS["report"]  # a collect_env output is ~10 KB; even with logs pasted below it, far less than this


def _read_bytes(path: Path) -> bytes:
    """At most MAX_BYTES + 1 bytes of the report (standard input for "-"); one clear line when it cannot be read."""
    try:
        if str(path) == "-":  # standard input may be a pipe: read at most one byte past the cap
            return sys.stdin.buffer.read(MAX_BYTES + 1)
        # a regular file only (a FIFO must not hang, /dev/zero must not fill memory), refused by size
        return read_bytes(path, "report", limit=MAX_BYTES)
    except ReadRefused as e:
        hint = "; give only the collect_env or report part" if e.errno == errno.EFBIG else f"; {_HINT}"
        raise UsageError(f"report {path} is {e.strerror}{hint}") from None
    except OSError as e:
        raise UsageError(f"cannot read report {path}: {e.strerror or e}") from None


def _read_text(path: Path) -> str:
    data = _read_bytes(path)
    if len(data) > MAX_BYTES:
        raise UsageError(f"report {path} is larger than {MAX_BYTES // 2**20} MiB; give only the collect_env or "
                         "report part")
    text = _decode(data)
    if not text.strip():
        raise UsageError(f"report {path} is empty; {_HINT}")
    if text.count("\0") > len(text) // 100:
        raise UsageError(f"report {path} is binary, not a report; {_HINT}")
    return text


def _decode(data: bytes) -> str:
    return encoding.decode(data)


def _listed_unknown(data: dict[str, object]) -> set[str]:
    listed = data.get("unknown")
    return set(listed) if isinstance(listed, list) and all(isinstance(k, str) for k in listed) else set()


def _json_facts(data: object) -> Facts:
    """Facts of a saved report; keys it lists as unknown are left out so they stay unknown here too."""
    if not isinstance(data, dict) or not isinstance(data.get("facts"), dict):
        return {}
    accept.check_format(data, REPORT_MARK)
    unknown = _listed_unknown(data)
    facts: Facts = {}
    for key, value in data["facts"].items():
        if not isinstance(key, str) or key in unknown:
            continue
        if not _is_fact_value(value):
            raise UsageError(f"{shown(key)[1:-1]} in the report is a {type(value).__name__}, not a fact value; "
                             "give the file `olmo-doctor report -o FILE` wrote")
        facts[key] = value
    return facts


def _is_fact_value(value: object) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def parse_text(text: str) -> Facts:
    """Facts from any supported text format (format detected from its content), however it was pasted."""
    return read_text(text)[0]


def _json_lines(text: str, facts: Facts) -> Sources:
    """A saved report's facts, each sourced at its line in the JSON text."""
    lines = text.splitlines()
    out: Sources = {}
    for key in facts:
        at = next((i for i, ln in enumerate(lines) if f'"{key}"' in ln), -1)
        out[key] = Source(at + 1, lines[at].strip() if at >= 0 else "saved report")
    return out


def _saved(text: str) -> tuple[Facts, Sources] | None:
    """A saved report (JSON), given as is or pasted with prose around it; None when the text holds none."""
    stripped = text.lstrip().lstrip("\ufeff")
    if stripped.startswith("{"):
        try:
            facts = _json_facts(parse_json(stripped, "the report"))
            return facts, _json_lines(stripped, facts)
        except (ValueError, RecursionError):
            pass
    text = paste.unwrap_text(text)
    start, end = re.search(r"^\{", text, re.M), text.rfind("}")
    if start and end > start.start() and "\"facts\"" in text:  # a saved report pasted with prose around it
        try:
            body = text[start.start() : end + 1]
            facts = _json_facts(parse_json(body, "the report"))
            return facts, _json_lines(body, facts)
        except (ValueError, RecursionError):
            return {}, {}
    return None


# the label a whole-format parser read a yes/no or an absence from (collect_env's own wording)
_LABEL_OF = {"os.wsl": "platform", "os.kernel": "platform", "os.arch": "os", "os.name": "os", "gpu.count": "gpu",
             "torch.cuda": "cuda used to build", "torch.cuda_available": "available", "cpu.count": "cpu(s)",
             "os.conda_env": "[conda]", "torch.version": "pytorch", "driver.version": "driver"}


def _shown_value(value: FactValue) -> str | None:
    """The value as a report prints it; None for a yes/no, an absence or a list (found by the fact's label)."""
    return str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else None


def _line_of(key: str, value: FactValue, lines: list[str]) -> int | None:
    """The first line that shows the value (or, for a yes/no or an absence, the fact's label)."""
    needle = _shown_value(value)
    if needle and (at := next((i for i, ln in enumerate(lines) if needle in ln), None)) is not None:
        return at
    label = _LABEL_OF.get(key, key.split(".")[-1].replace("_", " ")).lower()
    return next((i for i, ln in enumerate(lines) if label in ln.lower()), None)


def locate(facts: Facts, lines: list[str], known: Sources) -> Sources:
    """Sources of facts a whole-format parser read (collect_env, raw captures): the first line that shows the
    value (or, for a yes/no or an absence, the fact's label)."""
    out: Sources = {}
    for key, value in facts.items():
        if key in known:
            continue
        at = _line_of(key, value, lines)
        if at is not None:
            out[key] = Source(at + 1, lines[at].strip())
    return out


def _with_fields(text: str, reading: freeform.Reading, lines: list[str]) -> tuple[Facts, Sources]:
    """What the text states anywhere, with collect_env's fields: its own output's fields win; a few hand-written
    labels are one more statement of each fact (disagreeing ones unknown)."""
    facts, sources = reading.facts, reading.sources
    if not collect_env.looks_like(text):
        return facts, sources
    fields = collect_env.parse(text)
    if collect_env.is_output(text):
        sources = {k: v for k, v in sources.items() if k not in fields or facts.get(k) == fields[k]}
        facts = {**facts, **fields}
    else:
        facts, sources = _agree(facts, sources, fields, reading.conflicts)
    sources.update(locate(facts, lines, sources))
    return facts, sources


def read_text(text: str) -> tuple[Facts, Sources, set[str]]:
    """Facts of a report text, each with the line it was read from, and the facts it states but leaves unknown
    (two different values, or a tool that printed an error for it): those are not derived from others either."""
    saved = _saved(text)
    if saved is not None:
        return (*saved, set())
    lines = paste.unwrap(text)
    if accept.is_documentation(lines):
        raise UsageError("this text documents olmo-doctor (it shows several of its commands), it is not a report of "
                         "a machine; " + _HINT)
    if capture.looks_like(paste.unwrap_text(text)):
        facts = capture.parse(paste.unwrap_text(text))
        return facts, locate(facts, lines, {}), set()
    if collect_env.is_output(text):  # several reports back to back: the first machine only (first_report)
        text = "\n".join(collect_env.first_report(lines))
    reading = freeform.read(text)
    if not accept.states_a_machine(reading.facts) and accept.own_output(lines):
        raise UsageError("this is olmo-doctor's own summary of a machine, not a report it can read back; on that "
                         "machine run `olmo-doctor report -o FILE` and give that file")
    facts, sources = _with_fields(text, reading, lines)
    return facts, sources, reading.conflicts


def _agree(facts: Facts, sources: Sources, fields: Facts, conflicts: set[str]) -> tuple[Facts, Sources]:
    """Hand-written labels and what the rest of the paste states, as one set of facts: a fact stated twice,
    differently, is unknown. GPUs are the labels' (a "GPU: H100 80GB HBM3 x 8" line reads better than prose)."""
    if any(k.startswith("gpu.") for k in fields):
        facts = {k: v for k, v in facts.items() if not k.startswith("gpu.")}
    out = dict(facts)
    for key, value in fields.items():
        if key not in conflicts:
            _state_again(out, key, value)
    return out, _kept_sources(sources, out, fields, facts)


def _kept_sources(sources: Sources, out: Facts, fields: Facts, facts: Facts) -> Sources:
    """The source lines of the facts the paste's prose stated and the labels left as they were."""
    return {k: v for k, v in sources.items() if k in out and (k not in fields or out[k] == facts.get(k))}


def _state_again(out: Facts, key: str, value: FactValue) -> None:
    """One more statement of a fact: kept when new or agreeing, the fact dropped (unknown) when they differ."""
    if key not in out:
        out[key] = value
        return
    ok, best = agreeing([out[key], value])
    if ok:
        out[key] = best
    else:
        out.pop(key)


def _finish(facts: Facts, sources: Sources | None = None, withheld: set[str] | None = None) -> Facts:
    """Derive what a report implies but does not print (compute capability from GPU names, ...); each derived fact
    is sourced where the fact it follows from was read. A fact the report states but leaves unknown (`withheld`:
    two values, "CUDA Version: ERR!") is not derived: the report said something else about it."""
    src: Sources = sources if sources is not None else {}
    withheld = withheld or set()
    _gpu_ccs(facts, src)
    if "driver.cuda_version" not in withheld:
        _driver_cuda(facts, src)
    if "torch.cuda" not in withheld:
        _torch_cuda(facts, src)
    nvcc = facts.get("nvcc.version")
    if nvcc and not facts.get("nvcc.max_gcc"):
        _derive(facts, src, "nvcc.max_gcc", nvcc_max_gcc(nvcc), "nvcc.version")
    facts.setdefault("gpu.source", "report")
    facts["facts.partial"] = True
    return facts


def _gpu_ccs(facts: Facts, src: Sources) -> None:
    count = facts.get("gpu.count")
    for i in range(count if isinstance(count, int) and 0 < count <= 256 else 0):
        name = facts.get(f"gpu.{i}.name")
        if facts.get(f"gpu.{i}.compute_capability") or not isinstance(name, str):
            continue
        cc = name_to_cc(name) or name_to_cc(collect_env.expand_shorthand(name))
        _derive(facts, src, f"gpu.{i}.compute_capability", cc, f"gpu.{i}.name")


def _driver_cuda(facts: Facts, src: Sources) -> None:
    """The newest CUDA whose GA driver floor the driver meets: what nvidia-smi would print."""
    driver = facts.get("driver.version")
    if not release(driver) or facts.get("driver.cuda_version"):
        return
    _derive(facts, src, "driver.cuda_version", newest_cuda_for_driver(driver), "driver.version")


def _torch_cuda(facts: Facts, src: Sources) -> None:
    """A wheel's local tag says what it was built for: +cu121 is CUDA 12.1, +cpu and +rocm are no CUDA."""
    torch = facts.get("torch.version")
    if not isinstance(torch, str) or "torch.cuda" in facts:
        return
    if m := re.search(r"\+cu(\d{1,2})(\d)$", torch):
        _derive(facts, src, "torch.cuda", f"{int(m.group(1))}.{m.group(2)}", "torch.version")
    elif re.search(r"\+(cpu|rocm[\d.]*)$", torch):
        facts["torch.cuda"] = None
        _source_via(src, "torch.cuda", "torch.version")


def _derive(facts: Facts, sources: Sources, key: str, value: FactValue, via: str) -> None:
    if value is not None:
        facts[key] = value
        _source_via(sources, key, via)


def _source_via(sources: Sources, key: str, via: str) -> None:
    base = sources.get(via)
    if base is not None and key not in sources:
        sources[key] = Source(base.line, base.text, via)


def facts_in_log(path: Path, limit: int = 1 << 20) -> Facts:
    """Facts of a collect_env report pasted inside a failure log (a GitHub issue's "Versions" section next to its
    traceback); {} when the log holds none, is larger than `limit`, or states something impossible."""
    try:
        text = _decode(read_bytes(path, "report", limit=limit))
    except OSError:  # not a regular file, or larger than a log with a report in it is
        return {}
    if not collect_env.looks_like(text):
        return {}
    facts = collect_env.parse(text)
    try:
        sanity.check(facts)
    except UsageError:
        return {}  # a mangled report must not steer the ranking
    return clean(_finish(facts)) if sum(v is not None for v in facts.values()) >= 2 else {}


def _folder_files(p: Path) -> list[Path]:
    files = [p / n for n in SIBLINGS if (p / n).is_file()] + sorted(p.glob("*.json"))
    if not files:
        raise UsageError(f"folder {p} holds no report files ({', '.join(SIBLINGS)}, *.json); {_HINT}")
    return files


def _files(p: Path) -> list[Path]:
    if str(p) == "-":  # pasted into the terminal or piped: `pbpaste | olmo-doctor check --from-report -`
        return [p]
    if p.is_dir():
        return _folder_files(p)
    if not p.exists():
        raise UsageError(f"report {p} does not exist; {_HINT}")
    if p.name in SIBLINGS:  # a capture folder: read the files taken alongside it as well
        return [p.parent / n for n in SIBLINGS if (p.parent / n).is_file()]
    return [p]


def _read_all(p: Path, texts: list[tuple[Path, str]]) -> tuple[Facts, Sources, set[str]]:
    """The files' facts merged (each fact sourced where it was first read), and those some file withheld."""
    sources: Sources = {}
    withheld: set[str] = set()
    try:
        parts = []
        for _, text in texts:
            facts, found, unknown = read_text(text)
            parts.append(facts)
            withheld |= unknown
            sources.update({k: v for k, v in found.items() if k not in sources})
        facts = merge(*parts)
        sanity.check(facts)
    except UsageError as e:  # name the file: the message itself names the value
        raise UsageError(f"report {p}: {e}") from None
    return facts, sources, withheld


def _note_several(p: Path, texts: list[tuple[Path, str]]) -> None:
    """A note, not a refusal: of several collect_env reports in one file, the first machine is still judged."""
    several = max((collect_env.report_count(text) for _, text in texts if collect_env.looks_like(text)), default=1)
    if several > 1:
        print(f"olmo-doctor: {p} holds {several} collect_env reports; judging the first only "
              "(give each machine's report on its own)", file=sys.stderr)


def read_report(path: str | Path) -> tuple[Facts, Sources]:
    """Facts of the machine a report describes, each with the line it came from; UsageError (exit 2) when the
    text is not a report (it states nothing about a machine, documents this tool, or is a format this release
    does not read) or states what no machine can be."""
    p = Path(path)
    texts = [(f, _read_text(f)) for f in _files(p)]
    facts, sources, withheld = _read_all(p, texts)
    _note_several(p, texts)
    if not accept.states_a_machine(facts):
        raise UsageError(f"{p} states nothing about a GPU, its driver, CUDA, torch or Python, so it is not a report "
                         f"olmo-doctor can judge; {_HINT}")
    facts = clean(_finish(facts, sources, withheld))
    return facts, {k: v for k, v in sources.items() if k in facts}


def load_report(path: str | Path) -> Facts:
    """Facts of the machine a report describes; UsageError (exit 2) when it is not a report."""
    return read_report(path)[0]
