"""One kernel per process over CUDA IPC: what a user writes across processes.

The one-shot collective the serving engines' custom all-reduce kernels are
(backends/cupy/baselines/ipc.py): each process reads its outputs' sources
straight from its peers' buffers between two barriers. It runs wherever
ranks are processes, on GPUs of their own or sharing one (where NCCL does not).
"""

from __future__ import annotations

from purlin_bench.baselines import PROCS, PROCS_SHARED, Baseline, Site


def _make(site: Site):
    from purlin_bench.backends.cupy.baselines.ipc import IpcBaseline
    from purlin_bench.backends.cupy.runtime.timing import StreamCandidate

    runner = site.runner
    ipc = IpcBaseline(site.inst, runner, site.part.timeout_s)
    ipc.check(site.inst)
    return StreamCandidate(lambda target, i: ipc(target, i % runner.sets), runner.main_stream(), ipc.settle)


BASELINE = Baseline(
    name="ipc",
    description="one kernel per process reading its peers' buffers over CUDA IPC, one shot",
    backend="cupy",
    layouts=(PROCS, PROCS_SHARED),
    make=_make,
)
