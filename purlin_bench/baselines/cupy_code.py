"""The plain CuPy code a user would write on one GPU (backends/cupy/baselines/cupy_code.py).

Elementwise CuPy ops and slice copies from the spec's dataflow, over every
virtual rank's buffers on one device. The reference of virtual ranks already
ran it to compute the expected outputs; timing it is enqueueing it again.
"""

from __future__ import annotations

from purlin_bench.baselines import VIRTUAL, Baseline, Site


def _make(site: Site):
    from purlin_bench.backends.cupy.runtime.timing import StreamCandidate

    code, sets = site.reference.direct, site.runner.sets

    def enqueue(target, i: int) -> None:
        with target:
            code(i % sets)

    return StreamCandidate(enqueue, site.runner.main_stream())


BASELINE = Baseline(
    name="cupy",
    description="elementwise CuPy ops and slice copies over the virtual ranks' buffers",
    backend="cupy",
    layouts=(VIRTUAL,),
    make=_make,
    elsewhere="the cupy baseline runs on virtual ranks (one GPU); with one rank per GPU use nccl",
)
