"""The tuner's real ``check`` and ``measure``: the measurement service.

Every trial goes through :class:`~purlin_bench.measure.service.MeasurementService`,
the one place that checks and times a configuration, so a trial's time is
what ``purlin bench`` measures for the same configuration and size: the same
buffer-set rotation, the same exact inputs checked on the device, the same
side-by-side timing. A bucket is checked and measured at each of its probe
sizes (``Bucket.probe_bytes``); its score is the geometric mean of the times
there.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from purlin_bench.backends.port import TimingPolicy
from purlin_bench.measure.compare import CheckResult
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.procs.errors import DistError
from purlin_bench.base.errors import PurlinError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.spec.instance import Instance
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.tools.tune.sweep import Bucket

# The baseline is timed once per bucket, for the plan's record: CuPy's
# bfloat16 baseline takes 47 ms a call at 256 MiB, and a tune of the
# trial's 140 calls per bucket ran past its time limit on the H200.
BASELINE_POLICY = TimingPolicy(iters=5, warmup=1, reps=3)


class ServiceBench:
    """``check`` and ``measure`` for one collective and dtype on a service."""

    def __init__(self, service: MeasurementService, spec: CollectiveSpec, dtype: str, root: int = 0):
        self.service = service
        self.spec = spec
        self.dtype = dtype
        self.root = root
        self._instances: dict[int, Instance] = {}

    def count(self, bucket: Bucket) -> int:
        return self._count(bucket.min_bytes)

    def _count(self, nbytes: int) -> int:
        _, np_dtype = resolve_dtype(self.dtype)
        return self.spec.count_for_bytes(self.service.ranks, nbytes, np_dtype.itemsize)

    def _instance(self, count: int) -> Instance:
        if count not in self._instances:
            self._instances[count] = self.service.instance(self.spec, count, self.dtype, self.root)
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
        return tuple(
            self.spec.bytes_for_count(self.service.ranks, inst.count, inst.itemsize) for inst in self.probes(bucket)
        )

    def nbytes(self, bucket: Bucket) -> int:
        """The nccl-tests message size actually measured (count rounding)."""
        inst = self.instance(bucket)
        return self.spec.bytes_for_count(self.service.ranks, inst.count, inst.itemsize)

    def warm_up(self) -> int:
        """Compile the backend's kernel variants for this dtype before any
        study's clock starts (see Backend.warm_up)."""
        return self.service.warm_up(self.dtype, self.spec.redop)

    def prime(self, config: RunConfig, bucket: Bucket) -> None:
        """Check ``config`` once at this bucket's size, untimed, before its
        study's clock starts. The first check of a size builds what the
        backend builds for it: on a GPU, the baseline kernels that compute
        the expected outputs (CuPy compiled its reductions per size class,
        3-4 s each on a fresh machine, which ended 3 s studies after one
        trial). A failure is left to the study's own trial of ``config``
        to record, with its reason."""
        try:
            self.check(config, bucket)
        except DistError:
            raise  # a lost rank ends the run, not one trial
        except PurlinError:
            pass

    def check(self, config: RunConfig, bucket: Bucket) -> CheckResult:
        """Checked at every probe size, on the buffer sets it is then timed
        on; the first wrong one is the verdict."""
        wrong = total = 0
        for inst in self.probes(bucket):
            prepared = self.service.prepare(inst, config, self.dtype)
            result = CheckResult(prepared.nwrong, sum(prepared.program.out_counts))
            if not result.ok:
                return result
            wrong, total = wrong + result.wrong, total + result.total
        return CheckResult(wrong, total)

    def side_by_side(self, configs: Sequence[RunConfig], bucket: Bucket) -> dict[RunConfig, tuple[float, ...]]:
        """Microseconds per call of each configuration at each probe size,
        lower edge first, the configurations taking turns at each size."""
        policy = self.service.backend.trial_policy
        labels = {f"c{i}": c for i, c in enumerate(dict.fromkeys(configs))}
        per_probe = [self.service.compare(inst, labels, self.dtype, policy=policy) for inst in self.probes(bucket)]
        return {c: tuple(p.us(label) for p in per_probe) for label, c in labels.items()}

    def probe_times(self, config: RunConfig, bucket: Bucket) -> tuple[float, ...]:
        """Microseconds per call at each probe size, lower edge first."""
        return self.side_by_side([config], bucket)[config]

    def measure(self, config: RunConfig, bucket: Bucket) -> float:
        """The score a study minimises: the geometric mean of the probe times,
        so each size's relative change counts alike."""
        return statistics.geometric_mean(self.probe_times(config, bucket))

    def baseline(self, bucket: Bucket) -> float | None:
        """The strongest baseline's time (what a user would write instead),
        timed beside the default at the lower edge; None where the backend
        has none that runs here."""
        inst = self.instance(bucket)
        names = self.service.backend.baselines()[:1]
        if not names:
            return None
        try:
            compared = self.service.compare(
                inst,
                {"default": self.service.default_config(inst)},
                self.dtype,
                baselines=names,
                policy=BASELINE_POLICY,
            )
        except DistError:
            raise  # a lost rank ends the run, not one trial
        except PurlinError:
            return None
        return compared.us(names[0]) if names[0] in compared.times else None

    def busbw_gbps(self, bucket: Bucket, time_us: float) -> float:
        """nccl-tests' bus bandwidth: S / time, times the collective's factor."""
        inst = self.instance(bucket)
        algbw = self.nbytes(bucket) / (time_us * 1e-6) / 1e9
        return algbw * inst.busbw_factor()
