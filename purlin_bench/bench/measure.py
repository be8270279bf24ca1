"""Measure one collective at one size: check, time, compare, in and out of place.

A record follows nccl-tests' columns (size, count, type, redop, root, then
time / algbw / busbw / #wrong for out-of-place and in-place) plus ours: the
configuration, the baselines' times measured in the same run, and the floor.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from purlin_bench.bench.baseline import NumpyBaseline
from purlin_bench.bench.gpu_check import expected_outputs, run_and_count_wrong
from purlin_bench.bench.inputs import exact_inputs
from purlin_bench.bench.nccl_baseline import NCCL_COLLECTIVES, NcclBaseline
from purlin_bench.bench.roofline import Bandwidth
from purlin_bench.config import RunConfig
from purlin_bench.dtypes import count_wrong, resolve_dtype
from purlin_bench.errors import ExecutionError
from purlin_bench.executors.cupy_timing import Candidate, time_calls, time_side_by_side
from purlin_bench.heuristics import default_config
from purlin_bench.planner import plan
from purlin_bench.spec.instance import Instance

# Rotate inputs over enough buffer sets that one call's data is not still in
# L2 from the last (the H200 has 60 MB of L2); big messages need no rotation.
_ROTATE_BYTES = 256 << 20
_MAX_SETS = 8


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
    root: int
    strategy: str  # the configuration, readable
    config: dict[str, Any]
    out_of_place: Side
    in_place: Side | None
    baselines: dict[str, float] = field(default_factory=dict)  # name -> microseconds per call
    floor_us: float | None = None

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
    iters: int = 20
    warmup: int = 5
    reps: int = 5
    graph: bool = True
    check: bool = True
    inplace: bool = True
    baselines: tuple[str, ...] = ("cupy",)


def _side(inst: Instance, size: int, time_us: float, nwrong: int) -> Side:
    algbw = size / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return Side(time_us, algbw, algbw * inst.busbw_factor(), nwrong)


def _sets_for(program) -> int:
    per_set = (sum(program.in_counts) + sum(program.out_counts)) * resolve_dtype(program.dtype)[1].itemsize
    return int(min(_MAX_SETS, max(1, -(-_ROTATE_BYTES // max(1, per_set)))))


# Not a baseline a user would write, but what a tuned plan replaces: the
# untuned default (`--strategy auto`), checked and timed in the same process
# as the configuration under test, so "vs default" is a same-run ratio.
DEFAULT = "default"


class GpuMeasurer:
    """Measures on the cupy backend; baselines: cupy (virtual ranks), nccl (one
    rank per GPU) and ``default`` (the untuned default configuration)."""

    def __init__(self, executor, options: BenchOptions, bandwidth: Bandwidth | None):
        self.executor, self.options, self.bandwidth = executor, options, bandwidth

    def measure(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None) -> BenchRecord:
        o = self.options
        _, np_dtype = resolve_dtype(dtype)
        size = inst.spec.bytes_for_count(inst.ranks, inst.count, np_dtype.itemsize)
        program = plan(inst, config.strategy, dtype, redop, dict(config.plan_params))
        sets = _sets_for(program)
        runner = self.executor.prepare(program, sets=sets, **dict(config.exec_params))
        inputs = exact_inputs(program.in_counts, np_dtype, program.redop)
        baseline, expected = expected_outputs(runner, inst, program, inputs)
        if "cupy" not in o.baselines:
            baseline = None
        nwrong = run_and_count_wrong(runner, expected) if o.check else 0
        for slot in range(1, sets):
            runner.write_inputs(inputs, slot)
        device = runner.world.devices[0]
        # The configuration and the same-GPU baselines take turns batch by
        # batch (cupy_timing), so their ratios hold on a drifting machine.
        candidates = {"config": runner.candidate()}
        if baseline is not None:

            def enqueue(target, i: int) -> None:
                with target:
                    baseline(i % sets)

            candidates["cupy"] = Candidate(enqueue, runner.main_stream())
        if DEFAULT in o.baselines:
            candidates[DEFAULT] = self._default_runner(inst, dtype, redop, runner.world.fused, inputs, expected, sets).candidate()
        times = dict(zip(candidates, time_side_by_side(list(candidates.values()), device, o.iters, o.warmup, o.reps, o.graph)))
        oop = times.pop("config")
        baselines = {name: t.median_us for name, t in times.items()}
        if "nccl" in o.baselines and not runner.world.fused and inst.spec.name in NCCL_COLLECTIVES:
            nccl = NcclBaseline(inst, runner, dtype, program.redop)
            baselines["nccl"] = time_calls(lambda target, i: nccl(target, i % sets), runner.main_stream(), device, o.iters, o.warmup, o.reps, o.graph).median_us
        in_place = None
        if o.inplace and inst.inplace_refusal() is None:
            ip_program = plan(inst, config.strategy, dtype, redop, dict(config.plan_params), inplace=True)
            ip_runner = self.executor.prepare(ip_program, sets=1, **dict(config.exec_params))
            ip_wrong = 0
            if o.check:
                ip_runner.write_inputs(inputs)
                ip_wrong = run_and_count_wrong(ip_runner, expected)
            ip_time = ip_runner.time(o.iters, o.warmup, o.reps, o.graph)
            in_place = _side(inst, size, ip_time.median_us, ip_wrong)
        floor = self.bandwidth.floor_us(inst, size) if self.bandwidth else None
        return BenchRecord(inst.spec.name, size, inst.count, dtype, program.redop or "none", inst.root, config.text(), config.to_dict(), _side(inst, size, oop.median_us, nwrong), in_place, baselines, floor)

    def _default_runner(self, inst: Instance, dtype: str, redop: str | None, fused: bool, inputs, expected, sets: int):
        """The untuned default, prepared on the same inputs and checked."""
        config = default_config(inst, "cupy", fused)
        program = plan(inst, config.strategy, dtype, redop, dict(config.plan_params))
        runner = self.executor.prepare(program, sets=sets, **dict(config.exec_params))
        for slot in range(sets):
            runner.write_inputs(inputs, slot)
        if self.options.check:
            _refuse_wrong_default(config, run_and_count_wrong(runner, expected))
        return runner


def _refuse_wrong_default(config: RunConfig, wrong: int) -> None:
    if wrong:
        raise ExecutionError(f"the default configuration {config.text()} gave {wrong} wrong elements: a bug, please report it")


class NumpyMeasurer:
    """The CPU reference as a backend: times are CPU times of the reference
    executor (no GPU here), the baseline is NumPy's own reference."""

    def __init__(self, executor, options: BenchOptions):
        self.executor, self.options = executor, options

    def _time(self, call: Callable[[], object]) -> float:
        o = self.options
        for _ in range(max(0, min(o.warmup, 2))):
            call()
        samples = []
        for _ in range(max(1, min(o.reps, 3))):
            start = time.perf_counter()
            call()
            samples.append((time.perf_counter() - start) * 1e6)
        return float(np.median(samples))

    def measure(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None) -> BenchRecord:
        o = self.options
        _, np_dtype = resolve_dtype(dtype)
        size = inst.spec.bytes_for_count(inst.ranks, inst.count, np_dtype.itemsize)
        program = plan(inst, config.strategy, dtype, redop, dict(config.plan_params))
        inputs = exact_inputs(program.in_counts, np_dtype, program.redop)
        reference = NumpyBaseline(inst, program.redop)
        expected = reference.run(inputs)

        def side(prog) -> Side:
            runner = self.executor.prepare(prog)
            outs = runner.run(inputs)
            wrong = sum(count_wrong(a, b, None) for a, b in zip(outs, expected)) if o.check else 0
            return _side(inst, size, self._time(lambda: runner.run(inputs)), wrong)

        oop = side(program)
        in_place = side(plan(inst, config.strategy, dtype, redop, dict(config.plan_params), inplace=True)) if o.inplace and inst.inplace_refusal() is None else None
        baselines = {"numpy": self._time(lambda: reference.run(inputs))} if "numpy" in o.baselines else {}
        if DEFAULT in o.baselines:
            default = default_config(inst, "numpy")
            runner = self.executor.prepare(plan(inst, default.strategy, dtype, redop, dict(default.plan_params)))
            if o.check:
                _refuse_wrong_default(default, sum(count_wrong(a, b, None) for a, b in zip(runner.run(inputs), expected)))
            baselines[DEFAULT] = self._time(lambda: runner.run(inputs))
        return BenchRecord(inst.spec.name, size, inst.count, dtype, program.redop or "none", inst.root, config.text(), config.to_dict(), oop, in_place, baselines, None)
