"""Every file olmo and olmo-doctor read goes through olmo_common.bounded (regular files only, a cap per kind of file).

A raw read (`.read_text(`, `.read_bytes(`, `open(`, `json.load(`, `yaml.load(`/`yaml.safe_load(`, `tomllib.load(`)
anywhere in olmo/ or olmo_doctor/ fails this test unless the allowlist below names it with the reason it is not a
read of an untrusted file's contents, or is bounded another way. A stale entry (the line is gone) fails too.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAW = re.compile(r"\.read_text\(|\.read_bytes\(|(?<![\w.])open\(|\.open\(|\bjson\.load\(|\byaml\.(?:safe_)?load\("
                 r"|\byaml\.load_all\(|\btomllib\.load\(")

# (file, text on the line) -> why it is not an unbounded read of an untrusted file
ALLOWED: dict[tuple[str, str], str] = {
    ("olmo/lock.py", "fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | _SAFE)"):
        "the run lock: O_NOFOLLOW | O_NONBLOCK, read with one bounded pread of 4 KiB",
    ("olmo/lock.py", "fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | _SAFE, 0o644)"):
        "the run lock, created or taken: O_NOFOLLOW | O_NONBLOCK",
    ("olmo/metrics.py", "fd = os.open(self.path, os.O_WRONLY | os.O_APPEND"): "metrics.jsonl opened to append",
    ("olmo/lock.py", "fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)"):
        "a data folder opened as a directory to hold a flock on it, never read",
    ("olmo/outputs.py", "fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)"):
        "an output marker: O_NOFOLLOW | O_NONBLOCK, a regular file, 4 KiB read at most",
    ("olmo_doctor/commands/build_kernels.py", 'open(src, "rb") as source:'):
        "a --source sdist (checked to be a regular .tar.gz first) copied into the cache in 1 MiB chunks",
    ("olmo_doctor/commands/build_kernels.py", 'with open(path, "rb") as f:'):
        "a --source archive (a regular file, checked just before): its first 2 bytes",
    ("olmo_doctor/commands/build_kernels.py", 'with tarfile.open(path, "r:gz") as tar:'):
        "a --source archive (a regular gzip file): its first member only, to refuse an empty or broken one",
    ("olmo/interop/hf.py", 'with open(p, "rb") as f:'): "export's own output files, fsynced, never read",
    ("olmo/checkpoint_reader.py", "fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)"):
        "the checkpoint loader: regular files only, read by the byte ranges its index names, each item's kind and "
        "shape checked against the model first; `.metadata` through its restricted unpickler",
    ("olmo/torch_bytes.py", "with archive.open(name) as f:"):
        "a tensor's storage inside one checkpoint item, whose size the index gave and the loader checked",
    ("olmo/hints.py", "plain = yaml.safe_load(text) == text"): "a value olmo itself formats for a hint, never a file",
    ("olmo/data/readers.py", 'with open(path, "rb") as raw:'):
        "prepare-data's input reader: streamed, one document capped by --max-doc-size, decompression by "
        "--max-decompressed",
    ("olmo/data/inputs.py", 'with open(path, "rb") as f:'): "prepare-data's input check: reads 4 bytes of an input",
    ("olmo/data/corpus.py", 'with open(path, "wb") as raw'): "writes the tiny corpus",
    ("olmo_doctor/probes/xid.py", "fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)"):
        "/dev/kmsg: a device by nature, read non-blocking, bounded by records and time",
    ("olmo_doctor/build/execute.py", 'log_path.open("w") as log'): "build-kernels' own log, written",
    ("olmo_doctor/build/source.py", 'with tarfile.open(sdist, "r:gz") as tar:'):
        "an sdist: gzip only, every member checked against MAX_UNPACKED / MAX_MEMBERS before extraction",
    ("olmo_doctor/fix/wheelpack.py", 'with zf.open(zinfo, "w") as dst:'): "a member of the wheel being written",
    ("olmo_doctor/fix/journal_key.py", "fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL"):
        "the journal key, created inside its pinned folder",
    ("olmo_doctor/fix/journal_key.py", "fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK"):
        "the journal key: O_NOFOLLOW | O_NONBLOCK inside its pinned folder, a regular file, 33 bytes read at most",
    ("olmo_doctor/fix/journal_key.py", "fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW"):
        "the key folder, pinned (a directory descriptor, never read)",
    ("olmo_doctor/fix/journal.py", 'fd = os.open(where / ".lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW'):
        "the journal lock: O_NOFOLLOW | O_NONBLOCK, checked to be a regular file, never read",
    ("olmo_doctor/fix/pins.py", "fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)"):
        "a project folder pinned by descriptor (never read)",
    ("olmo_doctor/fix/pins.py", "fd = os.open(parent / name, _DIR_FLAGS)"):
        "a journal folder pinned by descriptor with O_NOFOLLOW (never read)",
    ("olmo_doctor/fix/pins.py", "fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)"):
        "read_regular: a regular file with one name, refused above its kind's cap before it is read",
}


def _code_only(source: str) -> list[str]:
    """The lines of `source` with every string and comment blanked out (docstrings may mention open())."""
    lines = [list(line) for line in source.splitlines()]
    blank = (tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", -1))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in blank:
            continue
        (r0, c0), (r1, c1) = tok.start, tok.end
        for r in range(r0, r1 + 1):
            row = lines[r - 1]
            for c in range(c0 if r == r0 else 0, c1 if r == r1 else len(row)):
                row[c] = " "
    return ["".join(row) for row in lines]


def _raw_reads() -> list[tuple[str, int, str]]:
    found = []
    for top in ("olmo", "olmo_doctor"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            source = path.read_text()
            originals = source.splitlines()
            for n, code in enumerate(_code_only(source), 1):
                if RAW.search(code):
                    found.append((rel, n, originals[n - 1].strip()))
    return found


def _allowed(rel: str, line: str) -> bool:
    return any(rel == f and text in line for f, text in ALLOWED)


def test_no_raw_read_outside_the_bounded_reader() -> None:
    stray = [f"{rel}:{n}: {line}" for rel, n, line in _raw_reads() if not _allowed(rel, line)]
    assert not stray, ("read these through olmo_common.bounded (read_bytes/read_text/open_regular/load_json/"
                       "parse_yaml), or add them to ALLOWED with the reason they are safe:\n" + "\n".join(stray))


def test_every_allowlist_entry_still_matches_a_line() -> None:
    seen = {(f, text) for rel, _, line in _raw_reads() for f, text in ALLOWED if rel == f and text in line}
    assert seen == set(ALLOWED), f"stale entries: {sorted(set(ALLOWED) - seen)}"


def test_the_pattern_sees_each_spelling() -> None:
    for line in ('p.read_text()', 'x = p.read_bytes()', 'with open(p) as f:', 'p.open("rb")', 'json.load(f)',
                 'yaml.safe_load(t)', 'yaml.load(t, Loader=L)', 'tomllib.load(f)', 'fd = os.open(p, 0)'):
        assert RAW.search(line), line
    for line in ('read_text(p, "recipe")', 'open_regular(p)', 'json.loads(data)', 'reopen(x)', 'subprocess.Popen(a)'):
        assert not RAW.search(line), line
