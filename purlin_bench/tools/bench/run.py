"""Drive a sweep: for each collective and size, pick configurations and measure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import PurlinError
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.spec.variable import counts_for_total
from purlin_bench.strategies import STRATEGIES, get_strategy


@dataclass(frozen=True)
class Choice:
    """How to pick configurations: a strategy name, 'auto', 'all', or a plan."""

    strategy: str = "auto"
    plan_overrides: dict[str, Any] = field(default_factory=dict)
    exec_overrides: dict[str, Any] = field(default_factory=dict)
    plan_lookup: Callable[[Instance, int], RunConfig] | None = None  # (instance, size bytes) -> config


# (instance, plan overrides, strategy or None for the untuned one) -> config: MeasurementService.default_config
DefaultConfig = Callable[[Instance, Mapping[str, Any], "str | None"], RunConfig]


def configs_for(inst: Instance, size: int, choice: Choice, default: DefaultConfig) -> list[RunConfig]:
    """The configurations to measure at one size; ``default(inst,
    plan_overrides, strategy)`` is the backend's default for a strategy
    (None: the untuned one; MeasurementService.default_config)."""
    if choice.plan_lookup is not None:
        return [choice.plan_lookup(inst, size)]
    if choice.strategy == "auto":
        # The user's own choices win over what the backend adjusted.
        return [_overridden(default(inst, choice.plan_overrides, None), choice)]
    names = list(STRATEGIES) if choice.strategy == "all" else [get_strategy(choice.strategy).name]
    return [_named(inst, name, choice, default) for name in names]


def _named(inst: Instance, name: str, choice: Choice, default: DefaultConfig) -> RunConfig:
    """Strategy ``name`` with the backend's datapath defaults for its program,
    not its plan parameters (a row of --strategy two-shot is two-shot on the
    datapath the default would run it on, compiled where the default
    compiles), the user's own choices over them."""
    base = default(inst, choice.plan_overrides, name)
    if base.strategy != name:  # the backend would run another strategy: the user asked for this one
        return RunConfig.make(name, dict(choice.plan_overrides), dict(choice.exec_overrides))
    return _overridden(base, choice)


def _overridden(base: RunConfig, choice: Choice) -> RunConfig:
    exec_params = dict(base.exec_params)
    if "kernel" in choice.exec_overrides and "datapath" not in choice.exec_overrides:
        # --kernel asks for a kernel on SMs: not copy engines the backend chose for the stages.
        exec_params.pop("datapath", None)
    return RunConfig.make(
        base.strategy, {**dict(base.plan_params), **choice.plan_overrides}, {**exec_params, **choice.exec_overrides}
    )


class Row(NamedTuple):
    """One bench row: its size S in bytes, the instance, and for a variable
    collective the counts every timed call runs with (None otherwise)."""

    size: int
    inst: Instance
    counts: tuple[int, ...] | None = None


def instances(spec: CollectiveSpec, sizes: list[int], ranks: int, dtype: str, root: int,
              distribution: str = "uniform") -> list[Row]:
    _, np_dtype = resolve_dtype(dtype)
    if spec.rooted and not 0 <= root < ranks:
        raise PurlinError(f"--root {root} is out of range for {ranks} ranks")
    if spec.variable:
        return _variable_rows(spec, sizes, ranks, np_dtype.itemsize, distribution)
    out, seen = [], set()
    for size in sizes:
        count = spec.count_for_bytes(ranks, size, np_dtype.itemsize)
        if count in seen:  # sizes below one element per chunk collapse onto one count
            continue
        seen.add(count)
        out.append(
            Row(
                spec.bytes_for_count(ranks, count, np_dtype.itemsize),
                instantiate(spec, ranks, count, np_dtype.itemsize, root if spec.rooted else 0),
            )
        )
    return out


def _variable_rows(spec: CollectiveSpec, sizes: list[int], ranks: int, itemsize: int, distribution: str) -> list[Row]:
    """A variable collective's rows: the call's counts add up to the total
    whose S is the size (nccl-tests' S: ``bench: size`` of ``total``),
    drawn from ``distribution`` with a seed of the row (every run and every
    candidate of a row time the same counts); the buffers hold the largest."""
    out, seen = [], set()
    shape = instantiate(spec, ranks, 1, itemsize)
    for size in sizes:
        total = spec.total_for_bytes(ranks, size, itemsize)
        if total in seen:
            continue
        seen.add(total)
        counts = counts_for_total(shape, total, distribution, np.random.default_rng(total))
        inst = instantiate(spec, ranks, max(1, *counts), itemsize)
        out.append(Row(spec.bytes_for_total(ranks, total, itemsize), inst, counts))
    return out
