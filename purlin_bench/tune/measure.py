"""The tuner's real ``check`` and ``measure``: a Session on a backend.

Everything goes through :class:`~purlin_bench.session.Session`, the one place
that checks and times a configuration, so ``purlin tune`` measures exactly as
``purlin check`` and ``purlin bench`` do (CUDA-graph timing on cupy, CPU wall
time of the reference on numpy). A bucket is checked and measured at each of
its probe sizes (``Bucket.probe_bytes``); its score is the geometric mean of
the times there.
"""

from __future__ import annotations

import statistics
from typing import Any

from purlin_bench.check import CheckResult
from purlin_bench.config import RunConfig
from purlin_bench.dtypes import resolve_dtype
from purlin_bench.errors import PurlinError
from purlin_bench.session import Session
from purlin_bench.spec.instance import Instance
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.tune.sweep import Bucket

# The numpy reference's times only exercise the path; a few repetitions do.
_NUMPY_TIMING = {"iters": 3, "warmup": 1, "reps": 3}
# On the GPU: 20 calls per CUDA graph, median of 5 replays. 10x3 let 3%
# noise at 4 KiB pick losers; the finalists are re-measured anyway (tuner.confirm_winner).
_GPU_TIMING = {"iters": 20, "warmup": 2, "reps": 5}
# The baseline is timed once per bucket for the plan's record; the bf16 CuPy
# baseline takes 47 ms a call at 256 MiB, so fewer calls.
_BASELINE_TIMING = {"iters": 5, "warmup": 1, "reps": 3}


class SessionBench:
    """``check`` and ``measure`` for one collective and dtype on a session."""

    def __init__(self, session: Session, spec: CollectiveSpec, dtype: str, root: int = 0):
        self.session = session
        self.spec = spec
        self.dtype = dtype
        self.root = root
        self._instances: dict[int, Instance] = {}

    def count(self, bucket: Bucket) -> int:
        return self._count(bucket.min_bytes)

    def _count(self, nbytes: int) -> int:
        _, np_dtype = resolve_dtype(self.dtype)
        return self.spec.count_for_bytes(self.session.ranks, nbytes, np_dtype.itemsize)

    def _instance(self, count: int) -> Instance:
        if count not in self._instances:
            self._instances[count] = self.session.instance(self.spec, count, self.dtype, self.root)
        return self._instances[count]

    def instance(self, bucket: Bucket) -> Instance:
        """The bucket's lower edge: what its plan entry records."""
        return self._instance(self.count(bucket))

    def probes(self, bucket: Bucket) -> tuple[Instance, ...]:
        """The instances a bucket is checked and timed at, lower edge first
        (sizes that round to one count are measured once)."""
        counts = dict.fromkeys(self._count(n) for n in bucket.probe_bytes)
        return tuple(self._instance(c) for c in counts)

    def probe_nbytes(self, bucket: Bucket) -> tuple[int, ...]:
        """The nccl-tests message sizes of the probes (count rounding)."""
        return tuple(self.spec.bytes_for_count(self.session.ranks, inst.count, inst.itemsize) for inst in self.probes(bucket))

    def nbytes(self, bucket: Bucket) -> int:
        """The nccl-tests message size actually measured (count rounding)."""
        inst = self.instance(bucket)
        return self.spec.bytes_for_count(self.session.ranks, inst.count, inst.itemsize)

    def warm_up(self) -> int:
        """Compile the backend's kernel variants for this dtype before any
        study's clock starts (see CupyExecutor.warm_up)."""
        return self.session.warm_up(self.dtype, self.spec.redop)

    def prime(self, config: RunConfig, bucket: Bucket) -> None:
        """Check ``config`` once at this bucket's size, untimed, before its
        study's clock starts. The first check of a size builds what the
        backend builds for it: on cupy, the baseline kernels that compute
        the expected outputs (CuPy compiles its reductions per size class,
        3-4 s each on a fresh machine, which ended 3 s studies after one
        trial). A failure is left to the study's own trial of ``config``
        to record, with its reason."""
        try:
            self.check(config, bucket)
        except PurlinError:
            pass

    def check(self, config: RunConfig, bucket: Bucket) -> CheckResult:
        """Checked at every probe size; the first wrong one is the verdict."""
        wrong = total = 0
        for inst in self.probes(bucket):
            result = self.session.check(inst, config, self.dtype)
            if not result.ok:
                return result
            wrong, total = wrong + result.wrong, total + result.total
        return CheckResult(wrong, total)

    def probe_times(self, config: RunConfig, bucket: Bucket) -> tuple[float, ...]:
        """Microseconds per call at each probe size, lower edge first."""
        options: dict[str, Any] = _NUMPY_TIMING if self.session.backend == "numpy" else _GPU_TIMING
        return tuple(self.session.time(inst, config, self.dtype, **options).median_us for inst in self.probes(bucket))

    def measure(self, config: RunConfig, bucket: Bucket) -> float:
        """The score a study minimises: the geometric mean of the probe times,
        so each size's relative change counts alike."""
        return statistics.geometric_mean(self.probe_times(config, bucket))

    def baseline(self, bucket: Bucket) -> float | None:
        """The baseline's time (what a user would write instead), when the
        backend has one: the bench's CuPy baseline on virtual ranks; the numpy
        reference has none."""
        return self.session.baseline_time(self.instance(bucket), self.dtype, **_BASELINE_TIMING)

    def busbw_gbps(self, bucket: Bucket, time_us: float) -> float:
        """nccl-tests' bus bandwidth: S / time, times the collective's factor."""
        inst = self.instance(bucket)
        algbw = self.nbytes(bucket) / (time_us * 1e-6) / 1e9
        return algbw * inst.busbw_factor()
