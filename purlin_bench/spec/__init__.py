"""Semantics layer: a collective is a naming of input and output layouts plus an op."""

from purlin_bench.spec.instance import Flow, Instance, Place, instantiate, key_text
from purlin_bench.spec.loader import CollectiveSpec, load_all_builtin, load_builtin, load_spec_file, resolve

__all__ = [
    "CollectiveSpec",
    "Flow",
    "Instance",
    "Place",
    "instantiate",
    "key_text",
    "load_all_builtin",
    "load_builtin",
    "load_spec_file",
    "resolve",
]
