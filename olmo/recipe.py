"""Recipes: turn a YAML file or a Python function, plus `--set a.b=c` overrides, into a validated TrainConfig.

    olmo train recipes/olmo2_60m.yaml                 # a YAML file (any path)
    olmo train olmo2_60m                              # a recipe shipped in recipes/ (YAML or Python), by name
    olmo train my_recipes.py:long_run --set steps=5000 --set optim.lr=3e-4

YAML mirrors the dataclasses in olmo/config.py (sections model:, data:, optim:, parallel:); `model:` may be a
named size (`model: olmo2_1b`) or a mapping that starts from one (`model: {size: olmo2_60m, n_layers: 4}`).
A Python recipe is a function that returns a TrainConfig (torchtitan's recipe style), so variants are
functions that call other recipes and change a field.
Unknown keys and wrongly typed values are usage errors naming the key, never silently ignored.
Recipes and `--set` values are read within a budget (olmo_common.bounded): a recipe file larger than 1 MiB, a
document that expands (YAML aliases) to more than 100,000 values or nests deeper than 64 levels, or a value
longer than 64K characters is refused in one line, and messages show values cut short (`shown`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

import yaml

from olmo.config import ConfigError, ModelConfig, TrainConfig, model_size
from olmo_common.bounded.data import DataRefused, parse_yaml, shown, yaml_loader
from olmo_common.bounded.files import read_bytes

_ROOT = Path(__file__).resolve().parent.parent  # the checkout, or site-packages for an installed wheel


def recipes_dir() -> Path | None:
    """The shipped recipes: recipes/ at the top of a checkout, else the wheel's copy, which pyproject installs as
    olmo_doctor/recipes (the doctor reads the same files); found by path, so `olmo` needs no olmo_doctor import."""
    for candidate in (_ROOT / "recipes", _ROOT / "olmo_doctor" / "recipes"):
        if candidate.is_dir():
            return candidate
    return None


def _find(spec: str) -> tuple[Path, str | None]:
    """(file, function name) for `path`, `path.py:func`, or a recipe name shipped in recipes/."""
    name, _, func = spec.partition(":") if spec.count(":") == 1 and not Path(spec).exists() else (spec, "", "")
    path = Path(name)
    if path.exists() and not path.is_dir():  # a FIFO or a device too: refused by name when it is read
        return path, func or None
    found = _shipped(name) if not path.suffix else None
    if found is not None:
        return found, func or None
    names = ", ".join(_shipped_names()) or "-"
    raise ConfigError(f"recipe '{spec}' not found: give a .yaml or .py file, or one of: {names}")


RECIPE_SUFFIXES = (".yaml", ".yml", ".py")


def _shipped_names() -> list[str]:
    shipped = recipes_dir()
    return sorted(p.stem for p in shipped.glob("*") if p.suffix in RECIPE_SUFFIXES) if shipped else []


def _shipped(name: str) -> Path | None:
    """The recipe shipped in recipes/ as `name` (any of its suffixes), if there is one."""
    shipped = recipes_dir()
    candidates = [shipped / f"{name}{suffix}" for suffix in RECIPE_SUFFIXES] if shipped else []
    return next((c for c in candidates if c.is_file()), None)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key written twice in one mapping (PyYAML keeps the last one silently, so
    `model:` given twice would train a model the user did not read). Keys a `<<` merge brings in may still be
    overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key '{key_node.value}' is given twice in one section", key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)


_RecipeLoader = yaml_loader(_UniqueKeyLoader)


def _recipe_bytes(path: Path) -> bytes:
    """The recipe file: a regular file of at most 1 MiB (a FIFO never blocks, a huge file is refused from its
    size at once, before Python or YAML sees a byte of it)."""
    try:
        return read_bytes(path, "recipe")
    except OSError as e:
        raise ConfigError(f"recipe {path} cannot be read ({e.strerror})") from None


def load_recipe(spec: str, overrides: list[str] | None = None) -> TrainConfig:
    """The TrainConfig of a recipe (a YAML file, a Python file[:function], or a shipped recipe's name) with the
    `--set` overrides applied; ConfigError (one line) for anything that is not one."""
    path, func = _find(spec)
    data = _recipe_bytes(path)
    raw = config_to_dict(_run_python_recipe(path, func)) if path.suffix == ".py" else _yaml_recipe(path, data)
    for item in overrides or []:
        apply_override(raw, item)
    return from_dict(raw, str(path))


def _yaml_recipe(path: Path, data: bytes) -> dict[str, Any]:
    """The sections of a YAML recipe, read within the loader's budget; ConfigError for anything else."""
    try:
        raw = parse_yaml(data.decode("utf-8"), f"recipe {path}", _RecipeLoader) or {}
    except UnicodeDecodeError:
        raise ConfigError(f"recipe {path} is not a text file (not UTF-8); give a YAML or Python recipe") from None
    except DataRefused as e:
        raise ConfigError(str(e)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}: {shown(str(getattr(e, 'problem', e)), 200)[1:-1]}"
                          ) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must be a YAML mapping of config sections (model:, data:, optim:, ...)")
    if not raw:  # an empty file (or only comments): surely not the recipe meant
        raise ConfigError(f"recipe {path} is empty; a recipe holds the config sections (model:, data:, optim:, "
                          "...), e.g. recipes/olmo2_60m.yaml")
    return raw


def _run_python_recipe(path: Path, func: str | None) -> TrainConfig:
    """Load the Python recipe `path` and call its function `func` (default: the one named like the file, else
    `recipe`); whatever goes wrong in the recipe's code is one line pointing into it."""
    module = _load_module(path)
    name = func or (path.stem if hasattr(module, path.stem) else "recipe")
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"{path} has no function '{name}'; name one with {path}:FUNCTION")
    try:
        cfg = fn()
    except ConfigError:
        raise
    except SystemExit as e:
        raise ConfigError(f"recipe {path}:{name}() called exit({e.code}); a recipe returns a config") from None
    except Exception as e:  # the recipe's own code: its error, told as one line pointing into the recipe
        raise ConfigError(f"recipe {path}:{name}() failed{_where(e, path)}: {type(e).__name__}: {e}") from None
    if not isinstance(cfg, TrainConfig):
        raise ConfigError(f"{path}:{name}() must return an olmo.config.TrainConfig (got {type(cfg).__name__})")
    return cfg


def _load_module(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"olmo_recipe_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    was, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ left beside the user's recipe
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise ConfigError(f"recipe {path} is not valid Python (line {e.lineno}: {e.msg})") from None
    except (ValueError, OSError) as e:  # null bytes, undecodable source, unreadable file
        raise ConfigError(f"recipe {path} cannot be loaded as Python ({type(e).__name__}: {e})") from None
    except ConfigError:
        raise
    except SystemExit as e:  # sys.exit() in a recipe must not end olmo with the recipe's exit code
        raise ConfigError(f"recipe {path} called exit({e.code}) while loading; a recipe returns a config") from None
    except Exception as e:
        raise ConfigError(f"recipe {path} failed while loading{_where(e, path)}: {type(e).__name__}: {e}") from None
    finally:
        sys.dont_write_bytecode = was
    return module


def _where(e: BaseException, path: Path) -> str:
    """' at line N' of the recipe file, from the deepest traceback frame inside it."""
    import traceback

    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    return f" at line {lines[-1]}" if lines else ""


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


MAX_SET = 64 << 10  # characters of one --set item: a long path list at most


def _override_value(key: str, text: str) -> Any:
    """A --set value parsed as YAML within the loader's budget (text that is not YAML stays text)."""
    if len(text) > MAX_SET:
        raise ConfigError(f"--set {shown(key, 60)}: the value is {len(text):,} characters, more than a setting "
                          f"can be ({MAX_SET:,})")
    try:
        return parse_yaml(text, f"--set {shown(key, 60)}") if text else ""
    except DataRefused as e:
        raise ConfigError(str(e)) from None
    except yaml.YAMLError:
        return text


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Set `a.b.c=value` in the raw recipe dict; the value is parsed as YAML (numbers, lists, null, true)."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {shown(item)} must look like section.key=value, e.g. --set optim.lr=3e-4")
    value = _override_value(key, text)
    parts = key.strip().split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if isinstance(child, str) and part == "model":  # `model: olmo2_1b` then --set model.n_layers=4
            child = {"size": child}
        if child is None:
            child = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {shown(key, 60)}: {shown(part, 40)} is a value, not a section")
        node[part] = child
        node = child
    node[parts[-1]] = value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("NoneType", "null")


class _NotA(Exception):
    """A value that is not of the type its field wants."""


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise _NotA


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _NotA
    if isinstance(value, int):
        return value  # exact, however large: the range checks name what is too big
    text = str(value).replace("_", "")
    if re.fullmatch(r"[+-]?\d{1,400}", text.strip()):
        return int(text)
    f = float(text)  # "1e6" is a whole number too
    if not f.is_integer():
        raise _NotA
    return int(f)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise _NotA
    return float(value)


def _to_str(value: Any) -> str:
    if value is None or isinstance(value, dict | list):  # YAML's null (`--set run_dir=` with only spaces) is no
        raise _NotA                                     # text: never the folder "None"
    return str(value)


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """`value` (from YAML or `--set`) as the field type `tp`, or a ConfigError naming `key` and the type."""
    origin = get_origin(tp)
    bad = ConfigError(f"{source}: {key} must be {_type_name(tp)} (got {shown(value)})")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise bad
        return _build(tp, value, key, source)  # type: ignore[arg-type]
    try:  # a wrong value raises _NotA, or TypeError/ValueError from the conversion
        if origin in (Union, types.UnionType):
            return _coerce_optional(value, get_args(tp), key, source)
        if origin is list:
            return _coerce_list(value, get_args(tp)[0], key, source)
        convert = _SCALARS.get(tp)
        return value if convert is None else convert(value)
    except (_NotA, TypeError, ValueError):
        raise bad from None


def _coerce_optional(value: Any, args: tuple[Any, ...], key: str, source: str) -> Any:
    """A value for `X | None`: none/null (any case) is None where None is allowed, anything else an X."""
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        if type(None) in args:
            return None
        raise _NotA
    return _coerce(value, next(a for a in args if a is not type(None)), key, source)


def _coerce_list(value: Any, item: Any, key: str, source: str) -> list[Any]:
    """A list value; a string is split at commas (`--set data.paths=a,b`)."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple):
        raise _NotA
    return [_coerce(v, item, f"{key}[{i}]", source) for i, v in enumerate(value)]


def _build(cls: type, raw: dict[str, Any], prefix: str, source: str) -> Any:
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    base = None
    raw = dict(raw)
    if cls is ModelConfig and "size" in raw:
        base = model_size(str(raw.pop("size")))
    for key in raw:
        if not isinstance(key, str):  # YAML makes `2: 3`, `true: x`, `null: 1` keys of other types
            kind = "null" if key is None else "true/false" if isinstance(key, bool) else "a number"
            raise ConfigError(f"{source}: key {shown(prefix + str(key))} is {kind}, not a name; write the name of a "
                              f"config field (known keys: {', '.join(names)})")
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(names)}"
            raise ConfigError(f"{source}: unknown key {shown(prefix + str(key))}; {hint}")
    kwargs = {k: _coerce(v, hints[k], prefix + k, source) for k, v in raw.items()}
    if base is not None:
        return dataclasses.replace(base, **kwargs)
    return cls(**kwargs)


def from_dict(raw: dict[str, Any], source: str = "config") -> TrainConfig:
    raw = dict(raw)
    if isinstance(raw.get("model"), str):
        raw["model"] = {"size": raw["model"]}
    sections = {"model": "model.", "data": "data.", "optim": "optim.", "parallel": "parallel."}
    for name in sections:
        if name in raw and not isinstance(raw[name], dict):
            raise ConfigError(f"{source}: '{name}' must be a mapping of {name}.* keys")
    cfg: TrainConfig = _build(TrainConfig, {k: v for k, v in raw.items() if k not in sections}, "", source)
    for name, prefix in sections.items():
        if name in raw:
            setattr(cfg, name, _build(type(getattr(cfg, name)), raw[name], prefix, source))
    return cfg


def to_yaml(cfg: TrainConfig) -> str:
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
