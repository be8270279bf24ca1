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
from purlin_bench.procs.errors import DistError
from purlin_bench.base.errors import PurlinError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.spec.instance import Instance
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.tools.bench.run import Row, instances
from purlin_bench.tools.tune.sweep import Bucket

# The baseline is timed once per bucket, for the plan's record: CuPy's
# bfloat16 baseline takes 47 ms a call at 256 MiB, and a tune of the
# trial's 140 calls per bucket ran past its time limit on the H200.
BASELINE_POLICY = TimingPolicy(iters=5, warmup=1, reps=3)


class ServiceBench:
    """``check`` and ``measure`` for one collective and dtype on a service.

    A size is a bench row (tools/bench/run.py): for fixed sizes the count
    nccl-tests' S gives; for sizes per call, capacity buffers and one call's
    counts adding up to the total S moves, drawn from ``counts`` (a
    distribution, spec.variable.DISTRIBUTIONS) with the row's seed, as
    ``purlin bench --counts`` times them."""

    def __init__(
        self, service: MeasurementService, spec: CollectiveSpec, dtype: str, root: int = 0, counts: str = "uniform"
    ):
        self.service = service
        self.spec = spec
        self.dtype = dtype
        self.root = root
        self.counts = counts
        self._rows: dict[int, Row] = {}  # asked bytes -> its row
        self._by_size: dict[int, Row] = {}  # measured bytes -> its row

    def _row(self, nbytes: int) -> Row:
        if nbytes not in self._rows:
            row = instances(self.spec, [nbytes], self.service.ranks, self.dtype, self.root, self.counts)[0]
            # One Row (one Instance object) per measured size: programs are
            # derived and cached per instance, and sizes that round alike share it.
            self._rows[nbytes] = self._by_size.setdefault(row.size, row)
        return self._rows[nbytes]

    def instance(self, bucket: Bucket) -> Instance:
        """The bucket's lower edge: what its plan entry records."""
        return self._row(bucket.min_bytes).inst

    def _probes(self, bucket: Bucket) -> tuple[Row, ...]:
        # Sizes that round to one count (or one total) are measured once.
        rows = {}
        for n in bucket.probe_bytes:
            row = self._row(n)
            rows.setdefault(row.size, row)
        return tuple(rows.values())

    def probes(self, bucket: Bucket) -> tuple[Instance, ...]:
        """The instances a bucket is checked and timed at, lower edge first."""
        return tuple(row.inst for row in self._probes(bucket))

    def probe_nbytes(self, bucket: Bucket) -> tuple[int, ...]:
        """The nccl-tests message sizes of the probes (count rounding)."""
        return tuple(row.size for row in self._probes(bucket))

    def nbytes(self, bucket: Bucket) -> int:
        """The nccl-tests message size actually measured (count rounding)."""
        return self._row(bucket.min_bytes).size

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
        for row in self._probes(bucket):
            prepared = self.service.prepare(row.inst, config, self.dtype, counts=row.counts)
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
        per_probe = [
            self.service.compare(row.inst, labels, self.dtype, policy=policy, counts=row.counts)
            for row in self._probes(bucket)
        ]
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
        row = self._row(bucket.min_bytes)
        inst = row.inst
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
                counts=row.counts,
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
