"""A search space: which strategies, which parameters, and when each applies.

The space is sampled *define-by-run*: a trial first picks a strategy, then
walks the parameters in the sweep file's order and suggests each one whose
condition holds in the values picked so far (and the study's context). A
condition is a mapping read as "every name holds one of its values"::

    blocks: {values: [1, 2, 4, 8], when: {datapath: sm}}
    slice_bytes: {values: [64K, 1M], when: {strategy: [ring, push]}}

That keeps conditions data (no expression language to secure) while covering
what a datapath needs: a parameter that only means something for some
strategies, or for one value of another parameter.

This module never imports Optuna: a trial is anything with Optuna's
``suggest_categorical(name, choices)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from purlin_bench.base.config import RunConfig

# Names a condition may read besides the parameters declared before it. They
# are fixed for a study: one study tunes one collective, dtype and rank count.
CONTEXT_NAMES = ("strategy", "op", "collective", "dtype", "ranks", "backend")


class SuggestingTrial(Protocol):
    def suggest_categorical(self, name: str, choices: Any) -> Any: ...


@dataclass(frozen=True)
class Condition:
    """All of ``clauses`` hold: each name's current value is one of its values.
    A name with no value (a parameter that was itself skipped) never holds."""

    clauses: tuple[tuple[str, tuple[Any, ...]], ...]

    def holds(self, scope: Mapping[str, Any]) -> bool:
        return all(name in scope and scope[name] in values for name, values in self.clauses)

    def text(self) -> str:
        return " and ".join(f"{n} in {list(v)}" if len(v) > 1 else f"{n} == {v[0]}" for n, v in self.clauses)

    def to_data(self) -> dict[str, list[Any]]:
        return {name: list(values) for name, values in self.clauses}


@dataclass(frozen=True)
class ParamSpace:
    name: str
    kind: str  # "plan" (strategy parameter) | "exec" (datapath parameter)
    values: tuple[Any, ...]
    when: Condition | None = None

    def applies(self, scope: Mapping[str, Any]) -> bool:
        return self.when is None or self.when.holds(scope)


@dataclass(frozen=True)
class Space:
    strategies: tuple[str, ...]
    params: tuple[ParamSpace, ...]

    def restricted(self, strategies: tuple[str, ...]) -> "Space":
        """The same space over the strategies that apply to a study."""
        return Space(tuple(s for s in self.strategies if s in strategies), self.params)

    def suggest(self, trial: SuggestingTrial, context: Mapping[str, Any]) -> RunConfig:
        """Sample one configuration, define-by-run."""
        scope = dict(context)
        scope["strategy"] = trial.suggest_categorical("strategy", self.strategies)
        plan: dict[str, Any] = {}
        datapath: dict[str, Any] = {}
        for p in self.params:
            if not p.applies(scope):
                continue
            value = trial.suggest_categorical(p.name, p.values)
            scope[p.name] = value
            (plan if p.kind == "plan" else datapath)[p.name] = value
        return RunConfig.make(scope["strategy"], plan, datapath)

    def params_of(self, config: RunConfig, context: Mapping[str, Any]) -> dict[str, Any]:
        """The trial parameters under which :meth:`suggest` records ``config``,
        for enqueueing it. Values outside the space's choices are left out
        (Optuna cannot record them); the sampler fills those in, and the
        tuner runs the enqueued configuration verbatim anyway."""
        values = {**dict(config.plan_params), **dict(config.exec_params)}
        out: dict[str, Any] = {}
        if config.strategy in self.strategies:
            out["strategy"] = config.strategy
        scope = {**dict(context), "strategy": config.strategy}
        for p in self.params:
            if not p.applies(scope) or p.name not in values:
                continue
            scope[p.name] = values[p.name]
            if values[p.name] in p.values:
                out[p.name] = values[p.name]
        return out

    def size(self, context: Mapping[str, Any] | None = None) -> int:
        """How many distinct configurations the space holds (conditions included)."""

        def count(scope: dict[str, Any], rest: tuple[ParamSpace, ...]) -> int:
            if not rest:
                return 1
            p, tail = rest[0], rest[1:]
            if not p.applies(scope):
                return count(scope, tail)
            return sum(count({**scope, p.name: v}, tail) for v in p.values)

        return sum(count({**dict(context or {}), "strategy": s}, self.params) for s in self.strategies)

    def to_data(self) -> dict[str, Any]:
        """Canonical plain data (hashing, artifacts)."""
        params = {}
        for p in self.params:
            entry: dict[str, Any] = {"values": list(p.values)}
            if p.when is not None:
                entry["when"] = p.when.to_data()
            params[p.name] = entry
        return {"strategy": list(self.strategies), "params": params}
