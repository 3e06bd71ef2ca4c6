"""Which files `olmo prepare-data` reads, checked before anything is written.

`-i` names files or folders. A folder is searched for the supported files (readers.KINDS), sorted; a folder that
Hugging Face `datasets` saved (`save_to_disk`: a `state.json` listing its `.arrow` files) is read as that
dataset, its files in the listed order, and is not searched further (its cache files are not data). A DatasetDict
folder (`dataset_dict.json`) is refused with its split names: training on every split at once (test included) is
never what is meant, so the split is named (`-i folder/train`). A `.arrow` file named directly is read as Arrow.

Each file is opened and its first bytes checked (a .gz that is not gzip, a .zst that is not zstd, a .parquet
without Parquet's magic), and a missing optional reader (pyarrow, zstandard) is one line naming the extra.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from olmo.data.compressed import GZIP_MAGIC, ZSTD_MAGIC, ZSTD_SKIPPABLE
from olmo.data.readers import KINDS, kind_of
from olmo.errors import ConfigError
from olmo_common.bounded.data import load_json

DATASET_STATE = "state.json"
DATASET_DICT = "dataset_dict.json"
SEARCHED = tuple(s for s in KINDS if s != ".arrow")  # loose .arrow files in a folder are caches, not data
NAMES = ", ".join(KINDS)
_MAGIC: tuple[tuple[str, Callable[[bytes], bool], str], ...] = (  # suffix, do the first 4 bytes fit it, why not
    (".gz", lambda h: h[:2] == GZIP_MAGIC,
     "it is not gzip data; recompress it, or drop the .gz from its name if it is plain text"),
    (".zst", lambda h: h == ZSTD_MAGIC or int.from_bytes(h, "little") in ZSTD_SKIPPABLE,
     "it is not zstd data; recompress it, or drop the .zst from its name if it is plain text"),
    (".parquet", lambda h: h == b"PAR1", "it is not a Parquet file (no PAR1 magic)"),
)


def find_inputs(paths: list[Path]) -> list[Path]:
    """Files named on the command line, plus every supported file under named directories, sorted."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += _search(p)
        elif p.is_file():
            if kind_of(p) is None:
                raise ConfigError(f"{p}: unsupported input type; use one of {NAMES} (or a saved datasets folder)")
            out.append(p)
        elif p.exists():  # a FIFO, socket or device: reading it could block forever or never end
            raise ConfigError(f"input {p} is not a regular file or folder")
        else:
            raise ConfigError(f"input {p} does not exist")
    if not out:
        raise ConfigError(f"no inputs ({NAMES}) found in {', '.join(map(str, paths))}")
    for f in out:
        _check_readable(f)
    _check_extras(out)
    return out


def _search(folder: Path, seen: set[Path] | None = None) -> list[Path]:
    seen = set() if seen is None else seen
    if folder.resolve() in seen:  # a symlink back up the tree
        return []
    seen.add(folder.resolve())
    if (folder / DATASET_STATE).is_file() or (folder / DATASET_DICT).is_file():
        return dataset_files(folder)
    found: list[Path] = []
    for child in sorted(folder.iterdir()):
        if child.is_dir():
            found += _search(child, seen)
        elif child.is_file() and child.name.endswith(SEARCHED):
            found.append(child)
    return found


def dataset_files(folder: Path) -> list[Path]:
    """The .arrow files of a folder `datasets.Dataset.save_to_disk` wrote, in its state.json's order."""
    if (folder / DATASET_DICT).is_file() and not (folder / DATASET_STATE).is_file():
        raise _dataset_dict(folder)
    listed = _json(folder / DATASET_STATE).get("_data_files")
    if not isinstance(listed, list) or not listed:
        raise ConfigError(f"{folder / DATASET_STATE} lists no data files; is {folder} a saved datasets folder?")
    files = [folder / _plain_name(folder, entry) for entry in listed]
    for path in files:
        if not path.is_file():
            raise ConfigError(f"{folder} is missing {path.name}, listed in its {DATASET_STATE}")
    return files


def _dataset_dict(folder: Path) -> ConfigError:
    splits = _json(folder / DATASET_DICT).get("splits")
    names = [s for s in splits if isinstance(s, str)] if isinstance(splits, list) else []
    return ConfigError(f"{folder} is a DatasetDict (splits: {', '.join(names) or '?'}); name the split to read, "
                       f"e.g. -i {folder / (names[0] if names else 'train')}")


def _plain_name(folder: Path, entry: object) -> str:
    """A data file's name from state.json. It is data: only a plain file name inside the folder is followed."""
    name = entry.get("filename") if isinstance(entry, dict) else None
    if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..") or "\\" in name:
        raise ConfigError(f"{folder / DATASET_STATE} lists a data file that is not a plain file name in {folder}; "
                          "refusing to read it")
    return name


def _json(path: Path) -> dict[str, object]:
    try:
        data = load_json(path, "dataset index")  # a state.json is a few hundred bytes
    except (OSError, ValueError, RecursionError) as e:
        raise ConfigError(f"{path}: cannot read it as JSON ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return data


def _check_readable(path: Path) -> None:
    """Refuse an input that cannot be opened, or whose first bytes are not what its name says, before anything
    is written (damage further into a file is found while reading it, olmo/data/readers.py)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ConfigError(f"input {path}: cannot read it: {e.strerror}") from None
    if not head:
        return  # an empty file holds no documents; --dry-run shows it
    problem = next((why for suffix, fits, why in _MAGIC if path.name.endswith(suffix) and not fits(head)), None)
    if problem:
        raise ConfigError(f"input {path}: {problem}")


def _check_extras(files: list[Path]) -> None:
    kinds = {kind_of(f) for f in files}
    if any(f.name.endswith(".zst") for f in files):
        from olmo.data.compressed import zstandard

        zstandard()
    for kind in ("parquet", "arrow"):
        if kind in kinds:
            from olmo.data.readers_arrow import pyarrow

            pyarrow(kind)
