"""Read a YAML file the project's way: any failure is one line naming the
file (and the line and column of a syntax error), raised as the caller's
error class so each layer keeps its own error type.

Bounded before anything walks the data: a file is read by textfile (a
regular file under a size cap), nesting is limited while the document is
composed (PyYAML recurses per level and would raise RecursionError), an
integer's digits are limited before Python converts it, and the document's
size with its aliases expanded is counted (an alias bomb is a few hundred
bytes that expand to billions of nodes for whoever walks them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from purlin_bench.base.textfile import MAX_DIGITS, read_text

MAX_DEPTH = 64
# Nodes counted with aliases expanded: a sweep or spec has a few hundred.
MAX_NODES = 100_000


class _Refused(Exception):
    """A bound crossed while loading; the message says which."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting and numbers of many digits."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep{_at(self.peek_event().start_mark)}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_int(loader: _BoundedLoader, node: yaml.Node) -> int:
    digits = sum(ch.isdigit() or ch in "abcdefABCDEF" for ch in str(node.value))
    if digits > MAX_DIGITS:
        raise _Refused(f"a number of {digits} digits (at most {MAX_DIGITS}){_at(node.start_mark)}")
    return yaml.SafeLoader.construct_yaml_int(loader, node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _at(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def expanded_size(data: Any, cap: int) -> int:
    """Nodes in ``data`` counting every alias again, stopping past ``cap``."""
    count, stack = 0, [data]
    while stack:
        node = stack.pop()
        count += 1
        if count > cap:
            return count
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple, set)):
            stack.extend(node)
    return count


def load_yaml_text(text: str, where: str | Path, error: type[Exception]) -> Any:
    """Parse ``text`` under the bounds above; ``where`` names it in errors."""
    try:
        data = yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as exc:
        raise error(f"{where}: refused YAML: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{where}: malformed YAML{_at(mark)}: {problem}") from None
    if expanded_size(data, MAX_NODES) > MAX_NODES:
        raise error(f"{where}: refused YAML: more than {MAX_NODES} values once its aliases are expanded")
    return data


def read_yaml(path: str | Path, error: type[Exception]) -> Any:
    path = Path(path)
    return load_yaml_text(read_text(path, error, "not a YAML file"), path, error)
