"""The fake device's baseline: the plain code a user would write, modelled 3x slower.

So bench, tune and plan-vs-default run their baseline paths in CI with no
GPU; its cost is the reference's modelled clock (backends/fake/).
"""

from __future__ import annotations

from purlin_bench.baselines import GPUS, VIRTUAL, Baseline, Site


def _make(site: Site):
    from purlin_bench.backends.fake import Clocked

    return Clocked(site.reference.baseline_cost)


BASELINE = Baseline(
    name="plain",
    description="the plain code a user would write, on the fake device's clock (3x the default's cost)",
    backend="fake",
    layouts=(VIRTUAL, GPUS),
    make=_make,
)
