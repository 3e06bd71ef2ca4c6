"""Token shards on disk: the format, its metadata, and `olmo validate-shards`.

A shard is a *headerless* array of token ids, `part-00000.npy`, exactly what `dolma tokens` writes and
OLMo-core's `NumpyFSLDataset` memory-maps (olmo_core/data/numpy_dataset.py): documents concatenated, each followed by
the tokenizer's EOS id, no BOS, dtype uint16 when every id fits (vocab <= 65,536) and uint32 otherwise (the
100,278-token dolma2 vocab). Despite the extension it is not NumPy's .npy format: read it with
`np.memmap(path, dtype=..., mode="r")`, not `np.load`.

Next to each shard, `part-00000.json` holds its metadata (tokens, documents, dtype, vocab size, EOS id,
tokenizer hash, sha256, a CRC32 per MiB so corruption can be located); `manifest.json` lists all shards once a
prepare run completes. Validation recounts everything against that metadata.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from olmo.errors import OlmoError
from olmo.fsutil import read_small
from olmo_common.bounded.data import DataRefused, load_json, parse_json, shown

MANIFEST = "manifest.json"
FORMAT = "olmo-token-shards"
VERSION = 1
BLOCK_BYTES = 1 << 20  # one CRC32 per MiB: a 1 GiB shard carries 1024 of them (about 10 KB of JSON)
SCAN_TOKENS = 1 << 24  # validation reads this many tokens at a time
# Shards one manifest may list: training memory-maps every shard at once, and the kernel's default
# vm.max_map_count is 65,530 maps per process; at the default 256M tokens per shard this is 12.8T tokens.
MAX_SHARDS = 50_000


def dtype_for_vocab(vocab_size: int) -> str:
    """uint16 when every id fits (ids < 65,536), else uint32, the same rule OLMo-core uses to read the files."""
    return "uint16" if vocab_size - 1 <= np.iinfo(np.uint16).max else "uint32"


def shard_name(index: int) -> str:
    return f"part-{index:05d}.npy"


@dataclass
class ShardMeta:
    """Metadata of one shard, stored as part-NNNNN.json next to it and inside manifest.json."""

    file: str
    num_tokens: int
    num_docs: int
    dtype: str
    vocab_size: int
    eos_id: int
    tokenizer_sha256: str
    sha256: str
    max_id: int
    block_crc32: list[str] = field(default_factory=list)
    resume_after: dict[str, int] = field(default_factory=dict)  # prepare-data position after this shard

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShardMeta:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def checksums(data: bytes | memoryview) -> tuple[str, list[str]]:
    """(sha256 hex, CRC32 per BLOCK_BYTES block as hex) of a shard's bytes."""
    mv = memoryview(data)
    crcs = [f"{zlib.crc32(mv[i:i + BLOCK_BYTES]):08x}" for i in range(0, len(mv), BLOCK_BYTES)]
    return hashlib.sha256(mv).hexdigest(), crcs


DTYPES = ("uint16", "uint32")


class ManifestError(OlmoError):
    """manifest.json (or a shard's metadata) is there but is not what prepare-data writes."""


def _is_whole_number(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shard_name_ok(name: object) -> TypeGuard[str]:
    """A plain .npy file name in this folder, at most NAME_MAX (255) long: the name goes into messages."""
    return isinstance(name, str) and name.endswith(".npy") and not name.startswith(".") and len(name) <= 255 \
        and "/" not in name and "\\" not in name


def _shard_problem(entry: Any) -> str | None:
    """Why a manifest's shard entry is not one, or None."""
    if not isinstance(entry, dict):
        return "is not an object"
    name = entry.get("file")
    if not _shard_name_ok(name):
        return f"names no shard file in this folder ({shown(name)})"
    return _count_problem(entry, name) or _format_problem(entry, name)


def _count_problem(entry: dict[str, Any], name: str) -> str | None:
    for key in ("num_tokens", "num_docs", "vocab_size", "eos_id", "max_id"):
        if not _is_whole_number(entry.get(key)):
            return f"({name}) has no whole number '{key}'"
    if entry["num_tokens"] < 0 or entry["vocab_size"] <= 0:
        return f"({name}) has a negative token count or vocab size"
    return None


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _format_problem(entry: dict[str, Any], name: str) -> str | None:
    if entry.get("dtype") not in DTYPES:
        return f"({name}) has dtype {shown(entry.get('dtype'))}, not one of {', '.join(DTYPES)}"
    if entry["vocab_size"] - 1 > (0xFFFF if entry["dtype"] == "uint16" else 0xFFFFFFFF):
        return f"({name}) has a vocab of {entry['vocab_size']:,}, too large for {entry['dtype']}"
    if not isinstance(entry.get("tokenizer_sha256"), str):
        return f"({name}) has no tokenizer_sha256"
    if not _is_sha256(entry.get("sha256")):
        return f"({name}) has no sha256 checksum"
    crcs = entry.get("block_crc32", [])
    if not isinstance(crcs, list) or not all(isinstance(c, str) for c in crcs):
        return f"({name}) has a malformed block_crc32 list"
    return None


def load_manifest(directory: Path) -> dict[str, Any] | None:
    """manifest.json of `directory`, checked against the schema prepare-data writes; None when there is none.
    ManifestError (one line: which field) when it is there but damaged, hand-edited or from another tool."""
    path = directory / MANIFEST
    if not path.exists():
        return None
    data = _parse_manifest(path)
    _check_header(path, data)
    _check_shard_list(path, data)
    return data


def _check_header(path: Path, data: Any) -> None:
    """ManifestError unless `data` is an olmo manifest with its vocab, EOS id, tokenizer checksum and dtype."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ManifestError(f"{path} is not an olmo token-shard manifest (format {FORMAT!r} missing)")
    tok = data.get("tokenizer")
    if not _is_whole_number(data.get("vocab_size")) or data["vocab_size"] <= 0 or not isinstance(tok, dict) \
            or not isinstance(tok.get("sha256"), str) or not _is_whole_number(data.get("eos_id")):
        raise ManifestError(f"{path} lacks vocab_size, eos_id or tokenizer.sha256")
    if data.get("dtype") not in DTYPES:
        raise ManifestError(f"{path} has dtype {shown(data.get('dtype'))}, not one of {', '.join(DTYPES)}")


def _check_shard_list(path: Path, data: dict[str, Any]) -> None:
    """ManifestError for a missing or empty shard list, a damaged entry, one of another dtype or vocab than the
    manifest, or a shard listed twice."""
    shards = data.get("shards")
    if not isinstance(shards, list) or not shards:
        raise ManifestError(f"{path} lists no shards")
    for i, s in enumerate(shards):
        problem = _shard_problem(s)
        if problem:
            raise ManifestError(f"{path}: shard entry {i} {problem}")
        if s["dtype"] != data["dtype"] or s["vocab_size"] != data["vocab_size"]:
            raise ManifestError(f"{path}: shard {s['file']} has dtype/vocab {s['dtype']}/{s['vocab_size']}, the "
                                f"manifest {data['dtype']}/{data['vocab_size']}")
    names = [s["file"] for s in shards]
    if len(set(names)) != len(names):
        raise ManifestError(f"{path} lists a shard twice")


def _parse_manifest(path: Path) -> Any:
    """The JSON of a manifest, within bounds: refused from its size alone when larger than any manifest, and
    its shards counted in the bytes before anything is built, so a 400,000-entry list costs only its bytes."""
    try:
        raw = read_small(path, "shard manifest")
        shards = raw.count(b'"file"')
        if shards > MAX_SHARDS:
            raise ManifestError(f"{path} lists {shards:,} shards, more than the {MAX_SHARDS:,} a run can map at "
                                "once; rerun `olmo prepare-data` with a larger --shard-size")
        return parse_json(raw, str(path), max_objects=MAX_SHARDS + 16)
    except OSError as e:
        raise ManifestError(f"{path} cannot be read ({e.strerror})") from None
    except DataRefused as e:
        raise ManifestError(str(e)) from None
    except ValueError:
        raise ManifestError(f"{path} is not valid JSON; rerun `olmo prepare-data` to rewrite it") from None


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """`load_manifest`, with None instead of an error for a damaged manifest (for callers that only look)."""
    try:
        return load_manifest(directory)
    except ManifestError:
        return None


def read_sidecars(directory: Path) -> list[ShardMeta]:
    """Metadata of every completed shard in `directory`, in shard order (a shard without a sidecar is incomplete)."""
    metas = []
    for side in sorted(directory.glob("part-*.json")):
        try:
            raw = load_json(side, "shard sidecar")
        except (OSError, ValueError, RecursionError):
            continue
        resume = raw.get("resume_after") if isinstance(raw, dict) else None
        whole = isinstance(resume, dict) and all(_is_whole_number(resume.get(k)) for k in ("input", "records"))
        if whole and _shard_problem(raw) is None:  # a sidecar that is not one marks no finished shard
            metas.append(ShardMeta.from_json(raw))
    return metas


# ----------------------------------------------------------------------------------------------------------
# validate-shards


@dataclass
class Problem:
    shard: str
    token_offset: int | None  # first token the problem concerns; None when it has no place (a count)
    message: str
    precision: int = 0  # 0 exact place, 1 a checksum block, 2 no place: the most precise is reported first

    def __str__(self) -> str:
        where = f" at token {self.token_offset:,}" if self.token_offset is not None else ""
        return f"{self.shard}{where}: {self.message}"


@dataclass
class ShardReport:
    file: str
    num_tokens: int
    num_docs: int
    max_id: int
    problems: list[Problem] = field(default_factory=list)


def validate_shard(directory: Path, meta: ShardMeta, vocab_size: int | None = None) -> ShardReport:
    """Recount one shard against its metadata; problems are ordered by how precisely they locate the damage."""
    path = directory / meta.file
    vocab = vocab_size or meta.vocab_size
    rep = ShardReport(meta.file, 0, 0, -1)
    if not path.is_file():
        rep.problems.append(Problem(meta.file, None, "file is missing"))
        return rep
    dtype = np.dtype(meta.dtype)
    size = path.stat().st_size
    n = rep.num_tokens = size // dtype.itemsize
    if size % dtype.itemsize:
        rep.problems.append(Problem(meta.file, n, f"size {size} bytes is not a whole number of {meta.dtype} tokens"))
    if n != meta.num_tokens:
        rep.problems.append(Problem(meta.file, min(n, meta.num_tokens), f"{n:,} tokens on disk but the metadata "
                                    f"says {meta.num_tokens:,} (truncated or appended)"))
    arr = np.memmap(path, dtype=dtype, mode="r", shape=(n,)) if n else np.zeros(0, dtype)
    scan = _recount(arr, meta.eos_id, vocab)
    rep.max_id, rep.num_docs = scan.max_id, scan.num_docs
    rep.problems += _content_problems(meta, arr, scan, vocab)
    rep.problems.sort(key=lambda p: p.precision)  # stable: within a class, in the order checked above
    return rep


@dataclass
class _Recount:
    """One pass over a shard's tokens: what validate_shard compares with the metadata."""

    sha256: str
    crcs: list[str]
    max_id: int = -1
    num_docs: int = 0
    first_bad: int | None = None  # the first token id outside the vocabulary


def _recount(arr: np.ndarray, eos_id: int, vocab: int) -> _Recount:
    sha = hashlib.sha256()
    scan = _Recount("", [])
    for start in range(0, len(arr), SCAN_TOKENS):
        chunk = np.asarray(arr[start:start + SCAN_TOKENS])
        if chunk.size:
            scan.max_id = max(scan.max_id, int(chunk.max()))
            scan.num_docs += int(np.count_nonzero(chunk == eos_id))
            if scan.first_bad is None:
                bad = np.flatnonzero(chunk >= vocab)
                if bad.size:
                    scan.first_bad = start + int(bad[0])
        raw = chunk.tobytes()
        sha.update(raw)
        scan.crcs.extend(checksums(raw)[1])  # SCAN_TOKENS * itemsize is a multiple of BLOCK_BYTES
    scan.sha256 = sha.hexdigest()
    return scan


def _content_problems(meta: ShardMeta, arr: np.ndarray, scan: _Recount, vocab: int) -> list[Problem]:
    """Where the recount disagrees with the metadata: an id outside the vocabulary, a cut last document, the
    document count, the checksum (located to a block where the block checksums allow)."""
    n, problems = len(arr), []
    if scan.first_bad is not None:
        problems.append(Problem(meta.file, scan.first_bad,
                                f"token id {int(arr[scan.first_bad])} is outside the vocabulary (size {vocab})"))
    if n and int(arr[n - 1]) != meta.eos_id:
        problems.append(Problem(meta.file, n - 1, f"the last token is not EOS ({meta.eos_id}): a cut document"))
    if scan.num_docs != meta.num_docs:
        problems.append(Problem(meta.file, None, f"{scan.num_docs:,} documents (EOS tokens) but the metadata says "
                                                 f"{meta.num_docs:,}", precision=2))
    if scan.sha256 != meta.sha256:
        problems.append(_locate_checksum_mismatch(meta, scan.crcs, arr.dtype.itemsize))
    return problems


def _locate_checksum_mismatch(meta: ShardMeta, crcs: list[str], itemsize: int) -> Problem:
    per_block = BLOCK_BYTES // itemsize
    for i, (got, want) in enumerate(zip(crcs, meta.block_crc32, strict=False)):
        if got != want:
            lo = i * per_block
            hi = min((i + 1) * per_block, meta.num_tokens) - 1
            return Problem(meta.file, lo, f"checksum mismatch: the bytes of tokens {lo:,}..{hi:,} changed", 1)
    return Problem(meta.file, None, "sha256 does not match the metadata", 2)


def shard_metas(directory: Path, vocab_size: int | None, dtype: str | None = None) -> list[ShardMeta]:
    """The shards of `directory` as the manifest (else the sidecars) lists them; ManifestError for a damaged
    manifest. Bare shards without metadata, e.g. `dolma tokens` output, get minimal metadata from `vocab_size`
    and `dtype` (default: the narrowest dtype that holds the vocab) so ids and sizes can still be checked."""
    manifest = load_manifest(directory)
    if manifest:
        return [ShardMeta.from_json(s) for s in manifest["shards"]]
    metas = read_sidecars(directory)
    if metas:
        return metas
    if vocab_size is None:
        return []
    dtype = dtype or dtype_for_vocab(vocab_size)
    out = []
    for p in sorted(directory.glob("*.npy")):
        n = p.stat().st_size // np.dtype(dtype).itemsize
        out.append(ShardMeta(p.name, n, -1, dtype, vocab_size, -1, "", "", -1))
    return out


def validate_bare(directory: Path, meta: ShardMeta, dtype_given: bool = False) -> ShardReport:
    """Checks for shards without metadata: whole tokens, ids inside the vocabulary, and (for a guessed uint16)
    not the pattern uint32 data leaves when read as uint16: a 0 in every second token."""
    path = directory / meta.file
    dtype = np.dtype(meta.dtype)
    size = path.stat().st_size
    rep = ShardReport(meta.file, size // dtype.itemsize, -1, -1)
    if size % dtype.itemsize:
        rep.problems.append(Problem(meta.file, rep.num_tokens,
                                    f"size {size} is not a whole number of {meta.dtype} tokens"))
    arr = np.memmap(path, dtype=dtype, mode="r", shape=(rep.num_tokens,)) if rep.num_tokens else np.zeros(0, dtype)
    odd_any = _scan_bare(arr, meta, rep)
    if meta.dtype == "uint16" and not dtype_given and not odd_any and rep.num_tokens >= 128 and not rep.problems:
        rep.problems.append(Problem(meta.file, None, "every second uint16 token is 0: this looks like uint32 data; "
                                                     "pass --dtype uint32", precision=2))
    return rep


def _scan_bare(arr: np.ndarray, meta: ShardMeta, rep: ShardReport) -> bool:
    """Fill in `rep`'s largest id and its first id outside the vocabulary (the scan stops there); return whether
    any odd-position token is non-zero."""
    odd_any = False
    for start in range(0, len(arr), SCAN_TOKENS):
        chunk = np.asarray(arr[start:start + SCAN_TOKENS])
        rep.max_id = max(rep.max_id, int(chunk.max()))
        odd_any = odd_any or bool(chunk[(start + 1) % 2::2].any())
        bad = np.flatnonzero(chunk >= meta.vocab_size)
        if bad.size:
            off = start + int(bad[0])
            rep.problems.append(Problem(meta.file, off, f"token id {int(chunk[bad[0]])} is outside the vocabulary "
                                                        f"(size {meta.vocab_size}); wrong --vocab-size or dtype?"))
            break
    return odd_any


def validate_dir(directory: Path, vocab_size: int | None = None, dtype: str | None = None,
                 progress: Callable[[int], None] | None = None) -> list[ShardReport]:
    """Validate every shard in `directory` (raises FileNotFoundError when there are none, ManifestError when
    its manifest is damaged). `dtype`, when given, must match the metadata; bare shards are read with it.
    `progress(nbytes)` hears of each shard's bytes once that shard is checked."""
    metas = shard_metas(directory, vocab_size, dtype)
    if not metas:
        raise FileNotFoundError(directory)
    reports = []
    for m in metas:
        reports.append(_validate_one(directory, m, vocab_size, dtype))
        if progress:
            path = directory / m.file
            progress(path.stat().st_size if path.is_file() else 0)
    if metas[0].sha256 and load_manifest(directory) is None:  # sidecars only: a shard whose sidecar is lost
        reports += _unlisted(directory, {m.file for m in metas})  # would otherwise go unchecked, and unread
    return reports


def _validate_one(directory: Path, meta: ShardMeta, vocab_size: int | None, dtype: str | None) -> ShardReport:
    if not meta.sha256:
        return validate_bare(directory, meta, dtype is not None)
    rep = validate_shard(directory, meta, vocab_size)
    if dtype and dtype != meta.dtype:
        rep.problems.insert(0, Problem(meta.file, None, f"the metadata says {meta.dtype} but --dtype is {dtype}", 0))
    return rep


def _unlisted(directory: Path, listed: set[str]) -> list[ShardReport]:
    """A report for each part-*.npy that no sidecar lists."""
    return [ShardReport(p.name, 0, -1, -1, [Problem(p.name, None, "has no metadata (its .json sidecar is missing or "
                                                    "damaged and there is no manifest); rerun `olmo prepare-data`",
                                                    2)])
            for p in sorted(directory.glob("part-*.npy")) if p.name not in listed]


def shard_bytes(directory: Path, vocab_size: int | None = None, dtype: str | None = None) -> int:
    """The bytes validate_dir will read (for a progress bar's total)."""
    return sum((directory / m.file).stat().st_size for m in shard_metas(directory, vocab_size, dtype)
               if (directory / m.file).is_file())
