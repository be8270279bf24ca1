"""The last step before a plan entry is written: the winner against the
default at every probe size of its bucket (tune.driver.guard_and_record),
with a fake bench, so no GPU is needed."""

from __future__ import annotations

import pytest

from purlin_bench.config import RunConfig
from purlin_bench.tune.driver import LOSS_BOUND, ProbeSamples, guard_and_record
from purlin_bench.tune.sweep import Bucket

BUCKET = Bucket(8, 4095)
WINNER = RunConfig.make("direct", {"channels": 4}, {})
DEFAULT = RunConfig.make("two-shot", {}, {})
PUSH = RunConfig.make("push", {}, {})


class FakeBench:
    """Microseconds per probe (8 B, 128 B, 2 KiB) for each configuration;
    records the order in which configurations were timed."""

    def __init__(self, times):
        self.times = times
        self.timed = []

    def probe_times(self, config, bucket):
        assert bucket == BUCKET
        self.timed.append(config)
        return self.times[config]

    def probe_nbytes(self, bucket):
        return bucket.probe_bytes


def test_a_winner_that_loses_at_any_probe_gives_way_to_the_default():
    # the lower edge alone would pick it: 2.8 against 3.1 us
    bench = FakeBench({WINNER: (2.8, 4.3, 4.4), DEFAULT: (3.1, 3.2, 3.3)})
    config, time_us, default_us, why = guard_and_record(ProbeSamples(bench, BUCKET), WINNER, DEFAULT, rounds=3)
    assert config == DEFAULT and time_us == default_us == 3.1
    assert "at 128" in why and "0.74x" in why
    # taking turns, round by round
    assert bench.timed == [WINNER, DEFAULT] * 3


@pytest.mark.parametrize("loss", [0.0, LOSS_BOUND * 0.9])
def test_a_winner_within_the_bound_everywhere_is_kept_with_the_edge_times(loss):
    bench = FakeBench({WINNER: (2.5, 3.0 * (1 + loss), 3.0), DEFAULT: (3.0, 3.0, 3.0)})
    config, time_us, default_us, why = guard_and_record(ProbeSamples(bench, BUCKET), WINNER, DEFAULT, rounds=1)
    assert (config, time_us, default_us, why) == (WINNER, 2.5, 3.0, None)


def test_medians_over_rounds_not_one_unlucky_draw():
    draws = iter([(2.5, 9.0, 3.0), (2.5, 3.0, 3.0), (2.5, 3.0, 3.0)])
    bench = FakeBench({DEFAULT: (3.0, 3.0, 3.0)})
    bench.probe_times = lambda config, bucket: next(draws) if config == WINNER else (3.0, 3.0, 3.0)
    assert guard_and_record(ProbeSamples(bench, BUCKET), WINNER, DEFAULT, rounds=3)[0] == WINNER


def test_without_a_measured_default_the_winner_stands_alone():
    bench = FakeBench({WINNER: (2.5, 3.0, 3.0)})
    assert guard_and_record(ProbeSamples(bench, BUCKET), WINNER, None, rounds=2) == (WINNER, 2.5, None, None)
    assert bench.timed == [WINNER, WINNER]
    # the default as winner is timed once per round, not twice
    bench = FakeBench({DEFAULT: (3.0, 3.0, 3.0)})
    assert guard_and_record(ProbeSamples(bench, BUCKET), DEFAULT, DEFAULT, rounds=2) == (DEFAULT, 3.0, 3.0, None)
    assert bench.timed == [DEFAULT, DEFAULT]


def _failing(config):
    from purlin_bench.errors import ExecutionError

    def probe_times(c, bucket):
        if c == config:
            raise ExecutionError("watchdog: rank 3 waited too long")
        return (3.0, 3.0, 3.0)

    return probe_times


def test_a_winner_that_fails_when_timed_again_gives_way_to_the_default():
    bench = FakeBench({})
    bench.probe_times = _failing(WINNER)
    config, time_us, default_us, why = guard_and_record(ProbeSamples(bench, BUCKET), WINNER, DEFAULT, rounds=3)
    assert (config, time_us, default_us) == (DEFAULT, 3.0, 3.0) and "failed when timed again: watchdog" in why


def test_a_default_that_fails_when_timed_again_leaves_the_winner_unguarded():
    bench = FakeBench({})
    bench.probe_times = _failing(DEFAULT)
    assert guard_and_record(ProbeSamples(bench, BUCKET), WINNER, DEFAULT, rounds=2) == (WINNER, 3.0, None, None)


def test_the_finalists_round_times_are_reused_not_taken_again():
    bench = FakeBench({WINNER: (2.5, 3.0, 3.0), DEFAULT: (3.0, 3.0, 3.0), PUSH: (2.9, 3.1, 3.1)})
    samples = ProbeSamples(bench, BUCKET)
    for _ in range(3):  # what confirm_winner does with samples.measure
        for config in bench.times:
            assert samples.measure(config, BUCKET) > 0
    timed = len(bench.timed)
    assert guard_and_record(samples, WINNER, DEFAULT, rounds=3) == (WINNER, 2.5, 3.0, None)
    assert len(bench.timed) == timed
    # a round short (a flaky sample dropped, or --confirm 1): topped up, in turns
    samples = ProbeSamples(bench, BUCKET)
    samples.measure(WINNER, BUCKET)
    bench.timed.clear()
    guard_and_record(samples, WINNER, DEFAULT, rounds=2)
    assert bench.timed == [WINNER, DEFAULT, DEFAULT]
