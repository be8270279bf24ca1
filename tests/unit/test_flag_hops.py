"""The flag hops on a program's critical path: a wait ends one hop after the
last notify it waits for, so a call costs about that many cross-rank round
trips where ranks are processes (2-3 us each under MPS). push emitted a
rank's consume between its stages, in flow order, and reduce-scatter became a
chain of one hop a rank (push-parity: 8 hops at 8 ranks, 40 us at 8
processes on an H100 where all-reduce's one hop took 21)."""

from __future__ import annotations

import pytest

from purlin_bench.base.errors import PurlinError
from purlin_bench.program.model import Notify
from purlin_bench.program.schedule import flag_hops
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.derive import derive_program


def hops_by_sweeps(program) -> int:
    """An oracle written apart from schedule.flag_hops: every list run as far
    as it can, again and again; the most hops any list needs to finish."""
    lists = {(r, c): steps for r, chans in enumerate(program.lists) for c, steps in enumerate(chans)}
    expected: dict = {}
    for steps in lists.values():
        for step in steps:
            if isinstance(step, Notify):
                expected[step.flag] = expected.get(step.flag, 0) + 1
    bumps: dict = {}
    at = dict.fromkeys(lists, 0)
    hops = dict.fromkeys(lists, 0)
    moved = True
    while moved:
        moved = False
        for key, steps in lists.items():
            while at[key] < len(steps):
                step = steps[at[key]]
                waits = getattr(step, "waits", ())
                if any(len(bumps.get(f, ())) < expected.get(f, 0) for f in waits):
                    break
                if waits:
                    hops[key] = max(hops[key], *(max(bumps[f]) + 1 for f in waits))
                if isinstance(step, Notify):
                    bumps.setdefault(step.flag, []).append(hops[key])
                at[key] += 1
                moved = True
    assert all(at[key] == len(steps) for key, steps in lists.items()), "a list never finished: a deadlock"
    return max(hops.values())


@pytest.mark.parametrize("ranks", [2, 3, 8])
@pytest.mark.parametrize(
    ("collective", "strategy", "hops"),
    [
        ("reduce-scatter", "push-parity", 1),  # one flag exchange a call
        ("all-reduce", "push-parity", 1),
        ("reduce-scatter", "push", 3),  # ready, data, done
        ("all-reduce", "push", 3),
        ("reduce-scatter-v", "push", 3),
        ("reduce-scatter", "direct", 2),  # ready, then done: the ipc baseline's two barriers
        ("all-reduce", "two-shot", 2),
    ],
)
def test_one_shot_strategies_take_a_fixed_number_of_hops_whatever_the_ranks(collective, strategy, hops, ranks):
    inst = instantiate(load_builtin(collective), ranks, 4096, 4)
    assert flag_hops(derive_program(inst, strategy, "float32", "sum")) == hops


def test_the_ring_is_a_chain_the_measure_can_see():
    inst = instantiate(load_builtin("reduce-scatter"), 8, 4096, 4)
    assert flag_hops(derive_program(inst, "ring", "float32", "sum")) > 8


@pytest.mark.parametrize("spec", load_all_builtin(), ids=lambda s: s.name)
def test_show_counts_the_hops_the_oracle_counts(spec):
    for ranks in (3, 8):
        inst = instantiate(spec, ranks, 1001, 4, ranks - 1 if spec.rooted else 0)
        for strategy in STRATEGIES:
            try:
                program = derive_program(inst, strategy, "float32", "sum" if inst.op == "reduce" else None)
            except PurlinError:  # a strategy this collective does not take
                continue
            assert flag_hops(program) == hops_by_sweeps(program), (spec.name, ranks, strategy)
