"""Parse JSON and YAML within a budget: size, nesting depth, nodes (aliases expanded), scalar length.

    value = load_json(path, "journal manifest")        # a file: bounded read, then bounded parse
    value = parse_json(data, "manifest.json")          # bytes or text already read
    value = parse_yaml(text, "recipe x.yaml")          # YAML through the safe loader, bounded

The safe YAML loader alone does not bound aliases: `a: &a [x, x]`, `b: &b [*a, *a]`, ... nine levels is a 1 KB
file whose value has a billion leaves. PyYAML shares the aliased objects, so loading is cheap, but everything that
walks the value afterwards (type checks, `repr` in an error message, a dump) walks the billion. So the composed
node graph is measured before anything is built: its size with every alias expanded (memoised per node, so the
count itself is linear in the file), its depth and its longest scalar; over a bound it is refused in one line
(DataRefused, a ValueError). JSON has no aliases; it is bounded by the caller's size cap and by a count of its
objects and arrays taken while parsing (so a 400,000-entry list is refused at the entry past the bound, not after
building it all), and deep nesting (RecursionError) is refused too.

`shown(value)` is the only way a value from a file enters a message: a short repr whatever the value holds.
"""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import Any

from olmo_common.bounded.files import read_bytes

MAX_NODES = 100_000  # values of a document, aliases expanded (a recipe has ~100, a report ~1,000)
MAX_DEPTH = 64
MAX_SCALAR = 64 << 10  # characters of one YAML string (a path is at most 4,096)


class DataRefused(ValueError):
    """A document refused for its shape: too many values, too deep, an alias bomb, an overlong scalar."""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


def shown(value: object, width: int = 80) -> str:
    """A repr of `value` fit for a one-line message: bounded in size and in the work it takes (reprlib stops at
    a few levels and items, so a billion-leaf value costs nothing), cut to `width` characters."""
    text = _REPR.repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


# ---------------------------------------------------------------------------------------------------- JSON
class _Count:
    def __init__(self, what: str, limit: int) -> None:
        self.what, self.limit, self.n = what, limit, 0

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        self.n += 1
        if self.n > self.limit:
            raise DataRefused(f"{self.what} holds more than {self.limit:,} objects; not a file this tool wrote")
        return dict(pairs)


def parse_json(data: bytes | str, what: str, *, max_objects: int = MAX_NODES) -> Any:
    """The JSON value of `data`; ValueError (json's own) when it is not JSON, DataRefused when it holds more
    than `max_objects` objects or nests deeper than Python can parse."""
    try:
        return json.loads(data, object_pairs_hook=_Count(what, max_objects))
    except RecursionError:
        raise DataRefused(f"{what} is nested too deeply to be a file this tool reads") from None


def load_json(path: str | Path, kind: str, *, max_objects: int = MAX_NODES, follow: bool = True) -> Any:
    """`parse_json` of a file read with `files.read_bytes(path, kind)` (OSError / ReadRefused from there)."""
    return parse_json(read_bytes(path, kind, follow=follow), str(path), max_objects=max_objects)


# ---------------------------------------------------------------------------------------------------- YAML
def measure_yaml(node: Any, what: str, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH,
                 max_scalar: int = MAX_SCALAR) -> int:
    """The number of values the composed YAML `node` stands for with every alias expanded; DataRefused when
    that is more than `max_nodes`, when it nests deeper than `max_depth` (aliases expanded too: an alias inside
    a deep list adds its own depth), when a scalar is longer than `max_scalar`, or when an alias refers to a
    value that holds it (a structure without end). Each node is measured once (memo), so this is linear in the
    document's size, and iterative, so a deep document cannot exhaust Python's stack here."""
    return _Measure(what, max_nodes, max_depth, max_scalar).run(node)


class _Measure:
    def __init__(self, what: str, max_nodes: int, max_depth: int, max_scalar: int) -> None:
        self.what, self.max_nodes, self.max_depth, self.max_scalar = what, max_nodes, max_depth, max_scalar
        self.done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, levels), aliases expanded
        self.open: set[int] = set()  # nodes whose children are being measured

    def run(self, root: Any) -> int:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, children_measured = stack.pop()
            if id(node) in self.done:
                continue
            kids = _children(node)
            if kids is None:
                self.done[id(node)] = self._scalar(node)
            elif children_measured:
                self.open.discard(id(node))
                self.done[id(node)] = self._combine(kids)
            else:
                self.open.add(id(node))
                stack.append((node, True))
                stack.extend((k, False) for k in kids if id(k) not in self.done and not self._cycle(k))
        return self.done[id(root)][0]

    def _cycle(self, kid: Any) -> bool:
        if id(kid) in self.open:
            raise DataRefused(f"{self.what} holds a YAML alias that refers to a value containing itself")
        return False

    def _scalar(self, node: Any) -> tuple[int, int]:
        if len(node.value) > self.max_scalar:
            raise DataRefused(f"{self.what} holds a value of {len(node.value):,} characters "
                              f"(at most {self.max_scalar:,})")
        return 1, 1

    def _combine(self, kids: list[Any]) -> tuple[int, int]:
        values = 1 + sum(self.done[id(k)][0] for k in kids)
        levels = 1 + max((self.done[id(k)][1] for k in kids), default=0)
        if values > self.max_nodes:
            raise DataRefused(f"{self.what} expands to more than {self.max_nodes:,} values (YAML aliases repeat what "
                              "they name: an alias bomb?); write the values out")
        if levels > self.max_depth:
            raise DataRefused(f"{self.what} is nested too deeply (more than {self.max_depth} levels)")
        return values, levels


def _children(node: Any) -> list[Any] | None:
    """A collection node's children (a mapping's keys and values), None for a scalar."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        return None
    return [k for pair in node.value for k in pair] if isinstance(node, yaml.MappingNode) else list(node.value)


def yaml_loader(base: type | None = None) -> type:
    """A loader class that measures each document (`measure_yaml`) between composing and building it: a
    subclass of `base` (a yaml.SafeLoader subclass, e.g. one refusing duplicate keys), else of the safe loader."""
    import yaml

    parent = base or yaml.SafeLoader

    def get_single_data(self: Any) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        measure_yaml(node, getattr(self, "what", "the document"))
        return self.construct_document(node)

    return type(f"Bounded{parent.__name__}", (parent,), {"get_single_data": get_single_data})


def parse_yaml(text: str, what: str, loader: type | None = None) -> Any:
    """The value of one YAML document; yaml.YAMLError when it is not YAML, DataRefused when it is past a bound
    (more than MAX_NODES values with aliases expanded, deeper than MAX_DEPTH, a scalar over MAX_SCALAR).
    `loader`: a class from `yaml_loader` (default: the bounded safe loader)."""
    instance = (loader or yaml_loader())(text)
    instance.what = what
    try:
        return instance.get_single_data()
    except RecursionError:  # the composer recurses per level: a document thousands of levels deep
        raise DataRefused(f"{what} is nested too deeply (more than {MAX_DEPTH} levels)") from None
    finally:
        instance.dispose()
