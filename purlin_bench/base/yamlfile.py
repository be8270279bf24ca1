"""Read a YAML file the project's way: any failure is one line naming the
file (and the line and column of a syntax error), raised as the caller's
error class so each layer keeps its own error type.

Bounded while the document is composed, before anything walks the data: a
file is read by textfile (a regular file under a size cap), nesting is
limited (PyYAML recurses per level and would raise RecursionError), and
nodes are counted as they are composed, an alias as the size of what it
names, so a file is refused at its MAX_NODES-th node rather than after a
parse of all of it (an alias bomb is a few hundred bytes that expand to
billions of nodes for whoever walks them). An integer's digits are limited
before Python converts it.

Events come from libyaml's parser when PyYAML has it (a wheel does): the
pure-Python scanner takes seconds per megabyte, libyaml hundredths, so a
file of the size cap is refused in well under a second. The composer and
constructor stay PyYAML's Python ones, which is where the bounds hook in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from purlin_bench.base.textfile import MAX_DIGITS, read_text


class _PyEvents(Reader, Scanner, Parser):
    """PyYAML's pure-Python event source (SafeLoader's), for a PyYAML built
    without libyaml: the same events, tens of times slower."""

    def __init__(self, stream):
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


try:
    from yaml.cyaml import CParser as _Events  # libyaml's scanner and parser
except ImportError:
    _Events = _PyEvents  # type: ignore[assignment,misc]

MAX_DEPTH = 64
# Nodes counted with aliases expanded: a sweep or spec has a few hundred.
MAX_NODES = 100_000
# libyaml's own bound (1000 levels), met before MAX_DEPTH when it scans ahead through ``[[[[...``.
_LIBYAML_DEPTH = "exceeded maximum nesting depth"


class _Refused(Exception):
    """A bound crossed while loading; the message says which."""


class _Bounded(Composer):
    """SafeLoader's composer, refusing deep nesting and more than MAX_NODES
    nodes with aliases expanded as it goes."""

    def __init__(self):
        Composer.__init__(self)
        self._depth = 0
        self.composed = 0  # nodes so far, an alias counted as the size of what it names
        self._sizes: dict[str, int] = {}  # anchor -> its node's size, once composed

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            event = self.peek_event()
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested more than {MAX_DEPTH} levels deep{_at(event.start_mark)}")
            if isinstance(event, AliasEvent):
                # An anchor still being composed (``&a [*a]``) expands without end;
                # an undefined one is left to PyYAML's own error.
                self._count(self._sizes.get(event.anchor, MAX_NODES + 1) if event.anchor in self.anchors else 0)
                return super().compose_node(parent, index)
            start = self.composed
            self._count(1)
            node = super().compose_node(parent, index)
            if event.anchor is not None:
                self._sizes[event.anchor] = self.composed - start
            return node
        finally:
            self._depth -= 1

    def _count(self, nodes: int) -> None:
        self.composed += nodes
        if self.composed > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} values once its aliases are expanded")


def _construct_int(loader: SafeConstructor, node: yaml.Node) -> int:
    digits = sum(ch.isdigit() or ch in "abcdefABCDEF" for ch in str(node.value))
    if digits > MAX_DIGITS:
        raise _Refused(f"a number of {digits} digits (at most {MAX_DIGITS}){_at(node.start_mark)}")
    return SafeConstructor.construct_yaml_int(loader, node)


def _loader(events: type) -> type:
    """A safe loader: ``events`` (libyaml's parser or PyYAML's) under the
    bounded composer, SafeLoader's constructor and resolver."""

    class BoundedLoader(_Bounded, events, SafeConstructor, Resolver):  # type: ignore[misc,valid-type]
        def __init__(self, stream):
            events.__init__(self, stream)
            _Bounded.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
    return BoundedLoader


_BoundedLoader = _loader(_Events)


def _at(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def load_yaml_text(text: str, where: str | Path, error: type[Exception]) -> Any:
    """Parse ``text`` under the bounds above; ``where`` names it in errors."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a safe loader: SafeConstructor)
    except _Refused as exc:
        raise error(f"{where}: refused YAML: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if problem == _LIBYAML_DEPTH:
            raise error(f"{where}: refused YAML: nested more than {MAX_DEPTH} levels deep{_at(mark)}") from None
        raise error(f"{where}: malformed YAML{_at(mark)}: {problem}") from None


def read_yaml(path: str | Path, error: type[Exception]) -> Any:
    path = Path(path)
    return load_yaml_text(read_text(path, error, "not a YAML file"), path, error)
