"""NCCL: the collective library a user calls with a rank per GPU.

Timed where NCCL runs: one rank per GPU, in one process (one communicator
over the world's GPUs) or one process per rank (each joins the run's
communicator). NCCL refuses two ranks on one GPU, so processes that share
one are refused with that reason (ipc.py times that layout). The calls each
collective maps to are in backends/cupy/baselines/nccl.py; a user's own YAML
collective has none.
"""

from __future__ import annotations

from purlin_bench.baselines import GPUS, PROCS, PROCS_SHARED, Baseline, Site


def _make(site: Site):
    from purlin_bench.backends.cupy.baselines.nccl import NcclBaseline
    from purlin_bench.backends.cupy.runtime.timing import StreamCandidate

    runner, program = site.runner, site.runner.program
    if site.layout == GPUS:
        # One communicator over these buffers, made when first asked and
        # kept with the reference (every comparison of this runner reuses it).
        kept = site.reference.kept
        if "nccl" not in kept:
            kept["nccl"] = NcclBaseline(site.inst, runner, program.dtype, program.redop)
        nccl = kept["nccl"]
    else:
        nccl = NcclBaseline(site.inst, runner, program.dtype, program.redop, group=site.part.procs.group)
    return StreamCandidate(lambda target, i: nccl(target, i % runner.sets), runner.main_stream())


BASELINE = Baseline(
    name="nccl",
    description="NCCL's grouped calls for the collective (built-in collectives only)",
    backend="cupy",
    layouts=(GPUS, PROCS),
    make=_make,
    refusals={PROCS_SHARED: "NCCL refuses two ranks on one GPU (one process per GPU runs it)"},
)
