"""Side-by-side timing's turn order, without a GPU: the candidates' batches
alternate, so a drift over the run lands on all of them alike."""

from __future__ import annotations

import pytest

from purlin_bench.backends.cupy.runtime.timing import time_side_by_side
from purlin_bench.backends.port import take_turns


def test_batches_take_turns_and_keep_their_own_samples():
    order = []

    def batch(name: str, value: float):
        def run() -> float:
            order.append(name)
            return value + len(order) / 100

        return run

    samples = take_turns([batch("a", 1.0), batch("b", 2.0), batch("c", 3.0)], reps=3)
    # Rounds alternate direction, so none always follows the same neighbour.
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert samples == [[1.01, 1.06, 1.07], [2.02, 2.05, 2.08], [3.03, 3.04, 3.09]]


def test_every_candidate_follows_more_than_one_neighbour():
    order = []
    take_turns([lambda n=n: order.append(n) or 0.0 for n in "abc"], reps=4)
    before = {n: {p for p, q in zip(order, order[1:]) if q == n} for n in "abc"}
    assert all(len(prev) >= 2 for prev in before.values()), before


def test_a_drift_hits_every_candidate_alike():
    # A machine slowing down by 1% per batch: timed one after the other, two
    # identical candidates would differ by ~5%; taking turns, by at most a step.
    clock = iter(range(100))
    same = lambda: 100.0 * (1 + next(clock) / 100)  # noqa: E731
    a, b = take_turns([same, same], reps=5)
    assert abs(sorted(a)[2] / sorted(b)[2] - 1) <= 0.01


@pytest.mark.parametrize("iters,reps", [(0, 3), (3, 0)])
def test_no_batch_is_refused_before_any_device_work(iters, reps):
    with pytest.raises(ValueError, match="at least 1"):
        time_side_by_side([], 0, iters, 1, reps, graph=True)
