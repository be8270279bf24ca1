"""The CPU reference's yardstick: the expected outputs computed directly with NumPy.

No program and no ranks: a yardstick for the CPU executor's times, not a
collective library. With one process per rank there is no plain CPU code
to compare with (the reference computed in one process is not a collective).
"""

from __future__ import annotations

from purlin_bench.baselines import VIRTUAL, Baseline, Site


def _make(site: Site):
    from purlin_bench.backends.numpy.executor import Call

    ref = site.reference
    return Call(lambda i: ref.inst.reference(ref.inputs, ref.redop))


BASELINE = Baseline(
    name="numpy",
    description="the spec's NumPy reference computing the expected outputs directly",
    backend="numpy",
    layouts=(VIRTUAL,),
    make=_make,
)
