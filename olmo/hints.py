"""Commands and arguments printed for the user to paste: each one a shell word that bash, zsh and fish split back
into exactly the argument meant, and whose `--set` value the recipe parser reads back as the same value.

    set_arg("model.sliding_window", [16, 16, 16, -1])  ->  --set 'model.sliding_window=[16,16,16,-1]'
    command("olmo", "validate-shards", Path("my data"))  ->  olmo validate-shards 'my data'
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

import yaml


def _float(x: float) -> str:
    if math.isnan(x):
        return ".nan"
    if math.isinf(x):
        return ".inf" if x > 0 else "-.inf"
    text = repr(x)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:  # YAML 1.1 (PyYAML) reads 1e-06 as a string, 1.0e-06 as a float
        text = f"{mantissa}.0e{exponent}"
    return text


def _text(text: str) -> str:
    try:
        plain = yaml.safe_load(text) == text and "," not in text and not text.startswith(("[", "{"))
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text)  # a JSON string is a double-quoted YAML string


def yaml_value(value: Any) -> str:
    """`value` in YAML flow style with no spaces, read back by yaml.safe_load as `value` itself."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float):
        return _float(value) if isinstance(value, float) else str(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{yaml_value(str(k))}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return _text(str(value))


def set_arg(key: str, value: Any) -> str:
    """`--set key=value` as one pasteable shell word (quoted where the shell would split or expand it)."""
    return "--set " + shlex.quote(f"{key}={yaml_value(value)}")


def command(*argv: str | Path) -> str:
    """A command line to paste: every argument quoted where the shell would split or expand it."""
    return " ".join(shlex.quote(str(a)) for a in argv)
