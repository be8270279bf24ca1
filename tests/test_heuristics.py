"""The untuned default is derived from the dataflow, and always applies."""

from __future__ import annotations

import pytest

from purlin_bench.heuristics import default_config, default_strategy
from purlin_bench.planner import applicable, plan
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin

EXPECTED_AT_8 = {
    "all-reduce": "two-shot",
    "reduce": "two-shot",
    "reduce-scatter": "direct",
    "all-gather": "push",
    "gather": "push",
    "all-to-all": "push",
    "broadcast": "two-shot",
    "scatter": "direct",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_AT_8))
def test_default_strategy_follows_the_dataflow(name):
    assert default_strategy(instantiate(load_builtin(name), 8, 4096, 4)) == EXPECTED_AT_8[name]


@pytest.mark.parametrize("spec", load_all_builtin(), ids=lambda s: s.name)
def test_default_config_always_plans(spec):
    for ranks in (1, 2, 3, 8):
        inst = instantiate(spec, ranks, 1001, 2, root=ranks - 1 if spec.rooted else 0)
        config = default_config(inst)
        assert applicable(inst)[config.strategy] is None
        assert plan(inst, config.strategy, "bfloat16", params=dict(config.plan_params)).ranks == ranks


def test_renaming_a_spec_does_not_change_the_choice():
    import dataclasses

    spec = load_builtin("reduce-scatter")
    renamed = dataclasses.replace(spec, name="my-collective")
    assert default_strategy(instantiate(renamed, 8, 64, 4)) == default_strategy(instantiate(spec, 8, 64, 4))
