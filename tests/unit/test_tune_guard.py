"""The last step before a plan entry is written (tune.finals.pick): the
study's finalists and the default timed side by side at every probe size of
the bucket, the default kept unless beaten, and the guard against a winner
that loses anywhere. A fake bench stands in for the measurement service."""

from __future__ import annotations

import pytest

from purlin_bench.base.config import RunConfig
from purlin_bench.base.errors import ExecutionError, PurlinError
from purlin_bench.tools.tune.finals import LOSS_BOUND, MARGIN, pick
from purlin_bench.tools.tune.sweep import Bucket

BUCKET = Bucket(8, 4095)
WINNER = RunConfig.make("direct", {"channels": 4}, {})
DEFAULT = RunConfig.make("two-shot", {}, {})
PUSH = RunConfig.make("push", {}, {})
RING = RunConfig.make("ring", {}, {})


class FakeBench:
    """Microseconds per probe (8 B, 128 B, 2 KiB) for each configuration;
    records each side-by-side call (which configurations took turns)."""

    def __init__(self, times, failing=()):
        self.times = times
        self.failing = set(failing)
        self.calls = []

    def side_by_side(self, configs, bucket):
        assert bucket == BUCKET
        self.calls.append(tuple(configs))
        broken = [c for c in configs if c in self.failing]
        if broken:
            raise ExecutionError(f"watchdog: rank 3 waited too long in {broken[0].strategy}")
        return {c: self.times[c] if not callable(self.times[c]) else self.times[c]() for c in configs}

    def probe_nbytes(self, bucket):
        return bucket.probe_bytes


def test_a_winner_that_loses_at_any_probe_gives_way_to_the_default():
    # the lower edge alone would pick it: 2.8 against 3.1 us
    bench = FakeBench({WINNER: (2.8, 2.3, 4.4), DEFAULT: (3.1, 3.2, 3.3)})
    final = pick(bench, BUCKET, [WINNER], DEFAULT, rounds=3)
    assert final.config == DEFAULT and final.time_us == final.default_us == 3.1
    assert "at 2K" in final.note and "0.75x" in final.note
    # every round times both side by side, in one call
    assert bench.calls == [(WINNER, DEFAULT)] * 3


@pytest.mark.parametrize("loss", [0.0, LOSS_BOUND * 0.9])
def test_a_winner_within_the_bound_everywhere_is_kept_with_the_edge_times(loss):
    bench = FakeBench({WINNER: (2.0, 3.0 * (1 + loss), 2.0), DEFAULT: (3.0, 3.0, 3.0)})
    final = pick(bench, BUCKET, [WINNER], DEFAULT, rounds=1)
    assert (final.config, final.time_us, final.default_us, final.note) == (WINNER, 2.0, 3.0, None)


def test_the_default_stays_unless_beaten_by_the_margin():
    close = 3.0 / (1 + MARGIN / 2)
    bench = FakeBench({WINNER: (close,) * 3, DEFAULT: (3.0,) * 3})
    assert pick(bench, BUCKET, [WINNER], DEFAULT, rounds=2).config == DEFAULT


def test_finalists_are_picked_by_the_geometric_mean_of_their_probe_medians():
    bench = FakeBench({WINNER: (2.0, 9.0, 9.0), PUSH: (2.5, 2.5, 2.5), RING: (2.6, 2.6, 2.6), DEFAULT: (3.0,) * 3})
    final = pick(bench, BUCKET, [WINNER, PUSH, RING], DEFAULT, rounds=3)
    assert final.config == PUSH and final.time_us == 2.5
    assert bench.calls == [(WINNER, PUSH, RING, DEFAULT)] * 3


def test_medians_over_rounds_not_one_unlucky_draw():
    draws = iter([(2.5, 9.0, 3.0), (2.5, 2.0, 2.0), (2.5, 2.0, 2.0)])
    bench = FakeBench({WINNER: lambda: next(draws), DEFAULT: (3.0, 3.0, 3.0)})
    assert pick(bench, BUCKET, [WINNER], DEFAULT, rounds=3).config == WINNER


def test_without_a_measured_default_the_winner_stands_alone():
    bench = FakeBench({WINNER: (2.5, 3.0, 3.0)})
    final = pick(bench, BUCKET, [WINNER], None, rounds=2)
    assert (final.config, final.time_us, final.default_us, final.note) == (WINNER, 2.5, None, None)
    # the default as the study's best is timed once per round, not twice
    bench = FakeBench({DEFAULT: (3.0, 3.0, 3.0)})
    assert pick(bench, BUCKET, [DEFAULT], DEFAULT, rounds=2).config == DEFAULT
    assert bench.calls == [(DEFAULT,)] * 2


def test_confirm_zero_takes_the_studys_best_and_still_guards_it():
    bench = FakeBench({WINNER: (2.8, 2.8, 2.8), PUSH: (2.0, 2.0, 2.0), DEFAULT: (3.0, 3.0, 3.0)})
    final = pick(bench, BUCKET, [WINNER, PUSH], DEFAULT, rounds=0)
    assert final.config == WINNER and bench.calls == [(WINNER, DEFAULT)]


def test_a_winner_that_fails_when_timed_again_gives_way_to_the_default():
    bench = FakeBench({WINNER: (2.0,) * 3, DEFAULT: (3.0,) * 3}, failing=[WINNER])
    final = pick(bench, BUCKET, [WINNER], DEFAULT, rounds=3)
    assert (final.config, final.time_us, final.default_us) == (DEFAULT, 3.0, 3.0)
    assert "failed when timed again: watchdog" in final.note
    # found once, then left out of the next rounds
    assert bench.calls == [(WINNER, DEFAULT), (WINNER,), (DEFAULT,), (DEFAULT,), (DEFAULT,)]


def test_a_default_that_fails_when_timed_again_leaves_the_winner_unguarded():
    bench = FakeBench({WINNER: (3.0,) * 3, DEFAULT: (2.0,) * 3}, failing=[DEFAULT])
    final = pick(bench, BUCKET, [WINNER], DEFAULT, rounds=2)
    assert (final.config, final.time_us, final.default_us) == (WINNER, 3.0, None)


def test_every_finalist_failing_is_an_error():
    bench = FakeBench({WINNER: (2.0,) * 3}, failing=[WINNER])
    with pytest.raises(PurlinError, match="every finalist failed"):
        pick(bench, BUCKET, [WINNER], None, rounds=1)
