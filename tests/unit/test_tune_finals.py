"""The tuner's finals over the fake check and measure (tune.finals.pick): a lucky
first draw is re-measured away, and a study with nothing correct ranks nothing."""

from __future__ import annotations

import optuna
import pytest

from purlin_bench.base.config import RunConfig
from purlin_bench.tools.tune.sweep import Bucket
from purlin_bench.tools.tune.tuner import TuneSettings, run_study
from tests.unit.test_tune_tuner import Fakes, spec  # the study fakes, shared


class NoisyFirstDraw(Fakes):
    """Each configuration's first measurement is a lucky draw: ring's first
    says 0.5 us, later ones its true 5 us. The study ranks by first draws."""

    def __init__(self):
        super().__init__()
        self.seen: set[RunConfig] = set()

    def measure(self, config: RunConfig, bucket: Bucket) -> float:
        true = super().measure(config, bucket)
        first = config not in self.seen
        self.seen.add(config)
        return 0.5 if first and config.strategy == "ring" else true


def _outcome(fakes, default, trials=12):
    return run_study(
        spec(default=default),
        fakes.measure,
        fakes.check,
        optuna.storages.InMemoryStorage(),
        TuneSettings(trials=trials, sampler="bruteforce", seed=1),
    )


class Finals:
    """tune.finals.pick's bench over the fakes: one probe, each call a draw."""

    def __init__(self, fakes):
        self.fakes = fakes

    def side_by_side(self, configs, bucket):
        return {c: (self.fakes.measure(c, bucket),) for c in configs}

    def probe_nbytes(self, bucket):
        return (bucket.min_bytes,)


def test_the_finals_re_measure_finalists_and_drop_a_lucky_draw():
    from purlin_bench.tools.tune.finals import pick

    fakes = NoisyFirstDraw()
    default = RunConfig.make("direct", {"channels": 1})
    outcome = _outcome(fakes, default)
    assert outcome.best.config.strategy == "ring"  # the study was fooled
    assert [r.time_us for r in outcome.ranked] == sorted(r.time_us for r in outcome.ranked)
    assert len({r.config for r in outcome.ranked}) == len(outcome.ranked)
    before = len(fakes.measured)
    final = pick(Finals(fakes), outcome.bucket, [r.config for r in outcome.ranked], outcome.default.config, rounds=3)
    assert final.config.strategy == "push" and final.time_us == pytest.approx(1.1)
    assert final.default_us == pytest.approx(10.1)
    # three finalists plus the default, three rounds each
    assert len(fakes.measured) - before == 4 * 3


def test_a_study_with_nothing_correct_ranks_nothing():
    fakes = Fakes(wrong=("direct", "push", "two-shot", "ring"))
    outcome = _outcome(fakes, RunConfig.make("direct", {"channels": 1}))
    assert outcome.best is None and outcome.ranked == ()
