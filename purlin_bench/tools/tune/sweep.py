"""Sweeps: what ``purlin tune`` searches, as data (``sweeps/*.yaml``).

A sweep names the message-size buckets, dtypes and rank counts to tune, the
number of trials per study, and the search space::

    name: quick
    sizes: [8, 64K, 1M, 16M, 256M]   # nccl-tests message size S, bucket lower edges
    dtypes: [float32, bfloat16]
    ranks: [8]
    trials: 24                       # per study (one study per size bucket)
    space:
      strategy: [direct, push, two-shot, ring]
      params:                        # in order; a condition reads earlier names
        channels: [1, 2, 4]
        slice_bytes: {values: [0, 256K, 1M], when: {strategy: ring}}
        datapath: [sm, ce]
        blocks: {values: [1, 2, 4, 8], when: {datapath: sm}}

Each size starts a bucket that covers every message from it up to the next
size (exclusive); the last bucket has no upper bound, and messages below the
first size use the first bucket. A study measures its bucket at the bucket's
lower edge. Planner parameters are those the strategies declare (slice_bytes,
channels); datapath parameters are any backend's (the registry's: blocks,
threads, datapath, unroll on the GPU), ignored by backends that lack them.

Everything is validated on load: a bad file is one :class:`SweepError`
naming the file, the field and why.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from purlin_bench.backends import all_params, names
from purlin_bench.base.config import Param
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import ProgramError, PurlinError
from purlin_bench.base.resources import data_dir
from purlin_bench.base.sizes import SizeError, format_bytes, parse_bytes
from purlin_bench.strategies import STRATEGIES
from purlin_bench.tools.tune.space import CONTEXT_NAMES, Condition, ParamSpace, Space
from purlin_bench.base.yamlfile import read_yaml

_TOP_KEYS = ("name", "description", "sizes", "dtypes", "ranks", "trials", "space")
_SPACE_KEYS = ("strategy", "params")
_PARAM_KEYS = ("values", "when")
_CONTEXT_DOMAINS: dict[str, tuple[Any, ...] | None] = {"op": ("copy", "reduce"), "backend": names()}


class SweepError(PurlinError):
    """A sweep file is malformed or names something unknown."""


@dataclass(frozen=True)
class Bucket:
    """Messages of ``min_bytes`` up to ``max_bytes`` (inclusive; None: no bound)."""

    min_bytes: int
    max_bytes: int | None

    @property
    def label(self) -> str:
        return format_bytes(self.min_bytes)

    @property
    def probe_bytes(self) -> tuple[int, ...]:
        """The sizes a bucket is measured at: its lower edge and, where it
        has a top, the largest power of two in it and the (power-of-two)
        geometric middle. A winner at the lower edge alone can lose all the
        way up: direct over 4 channels won 1.11x at 8 B and lost 0.75x from
        16 B to 4 KiB (docs/decisions.md, D17)."""
        low = self.min_bytes
        if self.max_bytes is None or low < 1:
            return (low,)
        top = 1 << (self.max_bytes.bit_length() - 1)
        if top <= low:
            return (low,)
        middle = 1 << round((math.log2(low) + math.log2(top)) / 2)
        return tuple(sorted({low, min(max(middle, low), top), top}))

    def contains(self, nbytes: int) -> bool:
        return nbytes >= self.min_bytes and (self.max_bytes is None or nbytes <= self.max_bytes)

    def text(self) -> str:
        upper = "inf" if self.max_bytes is None else format_bytes(self.max_bytes + 1)
        return f"[{self.label}, {upper})"


@dataclass(frozen=True)
class Sweep:
    name: str
    source: str
    description: str
    buckets: tuple[Bucket, ...]
    dtypes: tuple[str, ...]
    ranks: tuple[int, ...]
    trials: int
    space: Space

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sizes": [b.min_bytes for b in self.buckets],
            "max_bytes": self.buckets[-1].max_bytes if self.buckets else None,
            "dtypes": list(self.dtypes),
            "ranks": list(self.ranks),
            "trials": self.trials,
            "space": self.space.to_data(),
        }

    @property
    def digest(self) -> str:
        """A short hash of what the sweep searches (not of its comments)."""
        return _digest(self.to_data())

    @property
    def space_digest(self) -> str:
        """A short hash of the search space alone: studies are named by it, so
        changing sizes or trial counts resumes the same studies, while changing
        the space starts new ones (Optuna cannot change a parameter's choices)."""
        return _digest(self.space.to_data())

    def with_sizes(self, sizes: list[int]) -> "Sweep":
        return replace(self, buckets=buckets_from_sizes(sizes, f"{self.source} (--sizes)"))

    def capped(self, max_bytes: int) -> "Sweep":
        """Only the buckets that end at or below ``max_bytes``: a cap bounds
        what is measured, and a bucket is measured up to its top (the power
        of two below its end), so one that merely starts under the cap would
        still be timed far above it. The last, unbounded bucket is measured
        at its lower edge alone, so that edge is where it ends."""

        def end(b: Bucket) -> int:
            return b.min_bytes if b.max_bytes is None else b.max_bytes + 1

        return replace(self, buckets=tuple(b for b in self.buckets if end(b) <= max_bytes))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def buckets_from_sizes(sizes: list[int], where: str) -> tuple[Bucket, ...]:
    if not sizes:
        raise SweepError(f"{where}: sizes: empty: name at least one message size")
    for a, b in zip(sizes, sizes[1:]):
        if b <= a:
            raise SweepError(f"{where}: sizes: must increase strictly, got {format_bytes(a)} then {format_bytes(b)}")
    if sizes[0] < 1:
        raise SweepError(f"{where}: sizes: must be at least 1 byte, got {sizes[0]}")
    uppers: list[int | None] = [s - 1 for s in sizes[1:]] + [None]
    return tuple(Bucket(lo, hi) for lo, hi in zip(sizes, uppers))


# ---------------------------------------------------------------- loading


def builtin_sweep_paths() -> dict[str, Path]:
    return {p.stem: p for p in sorted(data_dir("sweeps").glob("*.yaml"))}


def resolve_sweep(name_or_path: str) -> Sweep:
    """A built-in sweep by name (quick, default) or a sweep file by path."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return load_sweep_file(name_or_path)
    paths = builtin_sweep_paths()
    if name_or_path not in paths:
        raise SweepError(
            f"unknown sweep '{name_or_path}' (built in: {', '.join(paths)}; or give a path to a .yaml file)"
        )
    return load_sweep_file(paths[name_or_path])


def load_sweep_file(path: str | Path) -> Sweep:
    path = Path(path)
    raw = read_yaml(path, SweepError)
    return parse_sweep(raw, str(path), default_name=path.stem)


def parse_sweep(raw: Any, source: str, default_name: str = "sweep") -> Sweep:
    """Build a validated sweep from parsed YAML; ``source`` names it in errors."""

    def fail(where: str, why: str) -> SweepError:
        return SweepError(f"{source}: {where}: {why}")

    if not isinstance(raw, dict):
        raise fail("top level", "a sweep is a mapping with sizes, dtypes, ranks and space")
    _no_unknown(raw, _TOP_KEYS, "top level", fail)
    for key in ("sizes", "space"):
        if key not in raw:
            raise fail(key, "missing")
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise fail("name", f"expected letters, digits, '-', '_' or '.', got {name!r}")
    sizes = [_size(v, f"sizes[{i}]", fail) for i, v in enumerate(_list(raw["sizes"], "sizes", fail))]
    buckets = buckets_from_sizes(sizes, source)
    dtypes = []
    for i, d in enumerate(_list(raw.get("dtypes", ["float32"]), "dtypes", fail)):
        try:
            dtypes.append(resolve_dtype(str(d))[0])
        except PurlinError as exc:
            raise fail(f"dtypes[{i}]", str(exc)) from None
    ranks = [_positive_int(v, f"ranks[{i}]", fail) for i, v in enumerate(_list(raw.get("ranks", [8]), "ranks", fail))]
    trials = _positive_int(raw.get("trials", 32), "trials", fail)
    space = _parse_space(raw["space"], fail)
    return Sweep(
        name=name,
        source=source,
        description=str(raw.get("description", "")).strip(),
        buckets=buckets,
        dtypes=tuple(dict.fromkeys(dtypes)),
        ranks=tuple(dict.fromkeys(ranks)),
        trials=trials,
        space=space,
    )


def _no_unknown(raw: dict, allowed: tuple[str, ...], where: str, fail) -> None:
    unknown = [k for k in raw if k not in allowed]
    if unknown:
        raise fail(where, f"unknown key(s) {', '.join(map(str, unknown))} (allowed: {', '.join(allowed)})")


def _list(value: Any, where: str, fail) -> list[Any]:
    if not isinstance(value, list):
        raise fail(where, f"expected a list, got {type(value).__name__}")
    if not value:
        raise fail(where, "empty")
    return value


def _size(value: Any, where: str, fail) -> int:
    try:
        return parse_bytes(value, where)
    except SizeError as exc:
        raise fail(where, exc.why) from None


def _positive_int(value: Any, where: str, fail) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise fail(where, f"expected a whole number >= 1, got {value!r}")
    return value


def _plan_param_minimums() -> dict[str, int]:
    return {p.name: p.minimum for s in STRATEGIES.values() for p in s.params}


def _parse_space(raw: Any, fail) -> Space:
    if not isinstance(raw, dict):
        raise fail("space", "expected a mapping with 'strategy' and 'params'")
    _no_unknown(raw, _SPACE_KEYS, "space", fail)
    if "strategy" not in raw:
        raise fail("space.strategy", "missing: list the strategies to search")
    if raw["strategy"] in ([], None):
        raise fail("space.strategy", "empty space: list at least one strategy")
    strategies = _list(raw["strategy"], "space.strategy", fail)
    for i, s in enumerate(strategies):
        if s not in STRATEGIES:
            raise fail(f"space.strategy[{i}]", f"unknown strategy {s!r} (known: {', '.join(STRATEGIES)})")
    if len(set(strategies)) != len(strategies):
        raise fail("space.strategy", "lists a strategy twice")
    params_raw = raw.get("params") or {}
    if not isinstance(params_raw, dict):
        raise fail("space.params", "expected a mapping of parameter name to values")
    plan_minimums = _plan_param_minimums()
    datapath = {name: param for name, (param, _) in all_params().items()}
    declared: dict[str, tuple[Any, ...]] = {"strategy": tuple(strategies)}
    params: list[ParamSpace] = []
    for name, entry in params_raw.items():
        where = f"space.params.{name}"
        if name in plan_minimums:
            kind = "plan"
        elif name in datapath:
            kind = "exec"
        else:
            known = ", ".join([*plan_minimums, *datapath])
            raise fail(where, f"unknown parameter {name!r} (known: {known})")
        if entry is None or entry == []:
            raise fail(where, "empty space: list at least one value")
        if isinstance(entry, list):
            entry = {"values": entry}
        if not isinstance(entry, dict):
            raise fail(where, "expected a list of values or a mapping with 'values' (and 'when')")
        _no_unknown(entry, _PARAM_KEYS, where, fail)
        if "values" not in entry:
            raise fail(f"{where}.values", "missing")
        raw_values = entry["values"]
        if raw_values in ([], None):
            raise fail(f"{where}.values", "empty space: list at least one value")
        listed = _list(raw_values, f"{where}.values", fail)
        values = tuple(
            _param_value(name, kind, v, f"{where}.values[{i}]", plan_minimums, datapath, fail)
            for i, v in enumerate(listed)
        )
        if len(set(values)) != len(values):
            raise fail(f"{where}.values", "lists a value twice")
        when = _parse_condition(entry["when"], f"{where}.when", declared, fail) if "when" in entry else None
        params.append(ParamSpace(name, kind, values, when))
        declared[name] = values
    return Space(tuple(strategies), tuple(params))


def _param_value(
    name: str, kind: str, value: Any, where: str, plan_minimums: dict[str, int], datapath: dict[str, Param], fail
) -> Any:
    if kind == "plan":
        number = _size(value, where, fail) if name.endswith("_bytes") else value
        if isinstance(number, bool) or not isinstance(number, int) or number < plan_minimums[name]:
            raise fail(where, f"{name} must be a whole number >= {plan_minimums[name]}, got {value!r}")
        return number
    if isinstance(value, (list, dict)) or value is None:
        raise fail(where, f"expected a single value, got {value!r}")
    try:
        return datapath[name].check(value)
    except ProgramError as exc:
        raise fail(where, str(exc)) from None


def _parse_condition(raw: Any, where: str, declared: dict[str, tuple[Any, ...]], fail) -> Condition:
    if not isinstance(raw, dict) or not raw:
        raise fail(where, "expected a mapping such as {datapath: sm} or {strategy: [ring, push]}")
    clauses = []
    for name, wanted in raw.items():
        at = f"{where}.{name}"
        if name not in declared and name not in CONTEXT_NAMES:
            names = ", ".join([*declared, *(n for n in CONTEXT_NAMES if n not in declared)])
            raise fail(
                at,
                f"unknown name {name!r}: a condition reads the study context or a parameter declared above it"
                f" ({names})",
            )
        values = tuple(wanted) if isinstance(wanted, list) else (wanted,)
        if not values:
            raise fail(at, "empty: list at least one value")
        if name in declared:
            domain = declared[name]
            values = tuple(_size(v, at, fail) if name.endswith("_bytes") else v for v in values)
        else:
            domain = _CONTEXT_DOMAINS.get(name)
        for v in values:
            if isinstance(v, (list, dict)) or v is None:
                raise fail(at, f"expected a value or a list of values, got {v!r}")
            if domain is not None and v not in domain:
                raise fail(at, f"{v!r} is not one of {name}'s values ({', '.join(map(str, domain))})")
        clauses.append((name, values))
    return Condition(tuple(clauses))
