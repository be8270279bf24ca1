"""Measure one collective at one size: check, time, compare, in and out of place.

A record follows nccl-tests' columns (size, count, type, redop, root, then
time / algbw / busbw / #wrong for out-of-place and in-place) plus ours: the
configuration, the baselines' times measured in the same run, and the floor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from purlin_bench.backends.port import TimingPolicy
from purlin_bench.base.config import RunConfig
from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import ExecutionError
from purlin_bench.measure.service import MeasurementService
from purlin_bench.spec.roofline import Bandwidth
from purlin_bench.spec.instance import Instance
from purlin_bench.spec.variable import at_counts


@dataclass(frozen=True)
class Side:
    time_us: float
    algbw: float  # GB/s, nccl-tests: S / time
    busbw: float  # GB/s, algbw times the collective's bus factor
    nwrong: int


@dataclass(frozen=True)
class BenchRecord:
    collective: str
    size: int  # bytes, nccl-tests' S
    count: int
    type: str
    redop: str
    root: int  # -1 for a collective without one, as nccl-tests writes it, in every format
    strategy: str  # the configuration, readable
    config: dict[str, Any]
    out_of_place: Side
    in_place: Side | None
    baselines: dict[str, float] = field(default_factory=dict)  # name -> microseconds per call
    floor_us: float | None = None
    # What produced the row, in the row: rows of several runs are often
    # concatenated, and a plan file or a rank layout in a header is lost then.
    ranks: int = 0
    layout: str = ""
    plan: str | None = None  # the plan file of --plan, else None
    # A variable collective's: how its counts were drawn, and the counts every call ran with.
    distribution: str | None = None
    counts: tuple[int, ...] | None = None

    def speedup(self, baseline: str) -> float | None:
        t = self.baselines.get(baseline)
        return t / self.out_of_place.time_us if t and self.out_of_place.time_us > 0 else None

    def roofline_pct(self) -> float | None:
        if self.floor_us is None or self.out_of_place.time_us <= 0:
            return None
        return 100.0 * self.floor_us / self.out_of_place.time_us

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["speedup"] = {name: self.speedup(name) for name in self.baselines}
        data["roofline_pct"] = self.roofline_pct()
        return data


@dataclass(frozen=True)
class BenchOptions:
    policy: TimingPolicy = TimingPolicy()
    check: bool = True
    inplace: bool = True
    baselines: tuple[str, ...] = ()
    layout: str = ""  # the backend's rank layout (8vr, nvlink-8, 2proc-1gpu), recorded in each row
    distribution: str = "uniform"  # a variable collective's counts (spec/variable.py DISTRIBUTIONS)
    plans: dict[str, str] = field(default_factory=dict)  # collective -> the plan file it runs


def _side(inst: Instance, size: int, time_us: float, nwrong: int) -> Side:
    algbw = size / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return Side(time_us, algbw, algbw * inst.busbw_factor(), nwrong)


# Not a baseline a user would write, but what a tuned plan replaces: the
# untuned default (`--strategy auto`), checked and timed in the same process
# as the configuration under test, so "vs default" is a same-run ratio.
DEFAULT = "default"
_CONFIG = "config"


class Measurer:
    """One bench row at a time, through the measurement service: the
    configuration, the default (when asked) and the backend's baselines
    timed side by side; in place timed after, on its own."""

    def __init__(self, service: MeasurementService, options: BenchOptions, bandwidth: Bandwidth | None):
        self.service, self.options, self.bandwidth = service, options, bandwidth
        self.unavailable: dict[str, str] = {}  # baseline -> why it could not run, first seen

    def measure(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None,
                counts: tuple[int, ...] | None = None) -> BenchRecord:
        """One row; ``counts``: a variable collective's calls' (bench.run.Row)."""
        o = self.options
        _, np_dtype = resolve_dtype(dtype)
        if inst.variable:
            size = inst.spec.bytes_for_total(inst.ranks, sum(counts or ()), np_dtype.itemsize)
        else:
            size = inst.spec.bytes_for_count(inst.ranks, inst.count, np_dtype.itemsize)
        configs = {_CONFIG: config}
        if DEFAULT in o.baselines:
            configs[DEFAULT] = self.service.default_config(inst)
        baselines = [b for b in o.baselines if b != DEFAULT]
        compared = self.service.compare(inst, configs, dtype, redop, baselines, o.policy, counts=counts)
        for name, why in compared.unavailable.items():
            self.unavailable.setdefault(name, why)
        if o.check and compared.nwrong.get(DEFAULT):
            raise ExecutionError(f"the default configuration {configs[DEFAULT].text()} gave {compared.nwrong[DEFAULT]} "
                                 f"wrong elements: a bug, please report it")
        times = {label: t.median_us for label, t in compared.times.items() if label != _CONFIG}
        nwrong = compared.nwrong[_CONFIG] if o.check else 0
        in_place = None
        if o.inplace and inst.inplace_refusal() is None:
            ip = self.service.compare(inst, {_CONFIG: config}, dtype, redop, (), o.policy, inplace=True,
                                      counts=counts)
            in_place = _side(inst, size, ip.us(_CONFIG), ip.nwrong[_CONFIG] if o.check else 0)
        # A variable row's floor is its call's bytes: its buffers' capacity put
        # the floor past the time measured (all-to-all-v at 139-149%).
        moved = at_counts(inst, counts) if inst.variable else inst
        floor = self.bandwidth.floor_us(moved, size) if self.bandwidth else None
        program = self.service.program(inst, config, dtype, redop)
        root = inst.root if inst.spec.rooted else -1
        return BenchRecord(inst.spec.name, size, inst.count, dtype, program.redop or "none", root, config.text(),
                           config.to_dict(), _side(inst, size, compared.us(_CONFIG), nwrong), in_place, times, floor,
                           inst.ranks, o.layout, o.plans.get(inst.spec.name),
                           o.distribution if inst.variable else None, counts if inst.variable else None)
