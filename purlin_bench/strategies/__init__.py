"""Orchestration strategies, one plug-in per file, behind a small registry.

Each strategy reads an instance's dataflow (never the collective's name) and
emits SNAC data steps; :mod:`purlin_bench.strategies.derive` adds the call protocol and
validates the result.
"""

from __future__ import annotations

from purlin_bench.base.errors import ProgramError
from purlin_bench.strategies import direct, push, push_parity, ring, two_shot
from purlin_bench.strategies.base import Strategy

STRATEGIES: dict[str, Strategy] = {
    s.name: s for s in (direct.STRATEGY, push.STRATEGY, push_parity.STRATEGY, two_shot.STRATEGY, ring.STRATEGY)
}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ProgramError(f"unknown strategy '{name}' (known: {', '.join(STRATEGIES)})")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "Strategy", "get_strategy"]
