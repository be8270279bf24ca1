"""The shortest torch code for the collective on one GPU (backends/cupy/baselines/torch_code.py).

Virtual ranks' inputs stacked in one tensor and the collective as one or two
torch kernels; offered only where torch is installed, and checked against
the expected outputs once before it is timed.
"""

from __future__ import annotations

from importlib.util import find_spec

from purlin_bench.baselines import VIRTUAL, Baseline, Site


def _available() -> str | None:
    return None if find_spec("torch") is not None else "the torch baseline needs torch (pip install torch)"


def _make(site: Site):
    from purlin_bench.backends.cupy.baselines.torch_code import checked_candidate

    return checked_candidate(site.reference)


BASELINE = Baseline(
    name="torch",
    description="the shortest torch code over one [R, ...] tensor of the virtual ranks",
    backend="cupy",
    layouts=(VIRTUAL,),
    make=_make,
    available=_available,
    elsewhere="the torch baseline runs on virtual ranks (one GPU); with one rank per GPU use nccl",
)
