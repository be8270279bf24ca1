"""One place that turns (collective, size, dtype, configuration) into checked
outputs and timings on a backend. ``purlin check``, ``purlin bench`` and
``purlin tune`` all go through a Session, so they measure the same way.

Backends: ``numpy`` (CPU reference; its times are CPU times of the reference,
useful only to exercise the tools) and ``cupy`` (GPU; see executors/cupy_exec).
"""

from __future__ import annotations

import statistics
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any

import numpy as np

from purlin_bench.check import CheckResult, check_program
from purlin_bench.config import RunConfig
from purlin_bench.dtypes import resolve_dtype
from purlin_bench.errors import ExecutionError, PurlinError
from purlin_bench.executors import get_executor, gpu_available
from purlin_bench.hardware import one_gpu
from purlin_bench.planner import plan
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.timing import Timing

# Runners kept prepared: one per probe size of a tune bucket (Bucket.probe_bytes).
_KEPT_RUNNERS = 3


def resolve_backend(name: str) -> tuple[str, str | None]:
    """'auto' picks cupy when a GPU is usable, else numpy; returns the backend
    and, when it fell back, a one-line note saying why."""
    if name == "auto":
        ok, why = gpu_available()
        return ("cupy", None) if ok else ("numpy", f"no GPU ({why}): using the numpy CPU reference")
    if name not in ("numpy", "cupy"):
        raise PurlinError(f"unknown backend '{name}' (known: auto, numpy, cupy)")
    if name == "cupy":
        ok, why = gpu_available()
        if not ok:
            raise PurlinError(f"backend cupy needs a GPU: {why}")
    return name, None


@contextmanager
def _device_errors_as_purlin():
    """CUDA's own errors (out of memory, launch failures) become ExecutionError,
    so a tuner records the configuration as invalid instead of dying."""
    try:
        yield
    except PurlinError:
        raise
    except Exception as exc:
        if type(exc).__module__.startswith("cupy") or type(exc).__module__.startswith("cupy_backends"):
            raise ExecutionError(f"{type(exc).__name__}: {exc}") from None
        raise


class Session:
    def __init__(self, backend: str = "numpy", ranks: int = 8, gpus: tuple[int, ...] | None = None, seed: int = 0, **executor_options: Any):
        self.backend = backend
        self.gpus = gpus
        self.ranks = len(gpus) if gpus else ranks
        if self.ranks < 1:
            raise PurlinError(f"ranks must be >= 1, got {self.ranks}")
        self.seed = seed
        options = dict(executor_options)
        if backend == "cupy" and gpus:
            options["devices"] = tuple(gpus)
        self.executor = get_executor(backend, **options)
        self._runners: OrderedDict = OrderedDict()

    @property
    def fused(self) -> bool:
        """Every rank on one GPU (virtual ranks): one launch runs them all."""
        return one_gpu(self.gpus)

    def describe(self) -> str:
        if self.backend == "numpy":
            return f"numpy CPU reference, {self.ranks} simulated ranks"
        return self.executor.describe(self.ranks)

    def warm_up(self, dtype: str, redop: str | None = None) -> int:
        """Compile ahead whatever the backend compiles on first use (the GPU
        kernel variants); returns how many, 0 where nothing is compiled."""
        warm = getattr(self.executor, "warm_up", None)
        if warm is None:
            return 0
        with _device_errors_as_purlin():
            return warm(dtype, redop, self.ranks)

    def instance(self, spec: CollectiveSpec, count: int, dtype: str, root: int = 0) -> Instance:
        _, np_dtype = resolve_dtype(dtype)
        return instantiate(spec, self.ranks, count, np_dtype.itemsize, root)

    def program(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False) -> Program:
        return plan(inst, config.strategy, dtype, redop, dict(config.plan_params), inplace)

    def runner(self, program: Program, config: RunConfig):
        """A prepared runner; the last few are kept, since a tuner checks and
        then times the same configuration at each of a bucket's probe sizes
        (preparing uploads tables)."""
        key = (program, config.exec_params)
        if key in self._runners:
            self._runners.move_to_end(key)
            return self._runners[key]
        while len(self._runners) >= _KEPT_RUNNERS:
            self._runners.popitem(last=False)  # free the oldest runner's device tables first
        self._runners[key] = runner = self.executor.prepare(program, **dict(config.exec_params))
        return runner

    def baseline_time(self, inst: Instance, dtype: str, redop: str | None = None, iters: int = 20, warmup: int = 5, reps: int = 5) -> float | None:
        """Microseconds per call of the plain CuPy baseline (virtual ranks on
        one GPU only; None elsewhere)."""
        if self.backend != "cupy":
            return None
        from purlin_bench.bench.gpu_check import expected_outputs
        from purlin_bench.bench.inputs import exact_inputs
        from purlin_bench.executors.cupy_timing import time_calls
        from purlin_bench.heuristics import default_config

        config = default_config(inst, self.backend, self.fused)
        program = self.program(inst, config, dtype, redop)
        runner = self.runner(program, config)
        if not runner.world.fused:
            return None
        baseline, _ = expected_outputs(runner, inst, program, exact_inputs(program.in_counts, resolve_dtype(dtype)[1], program.redop))

        def enqueue(stream, i: int) -> None:
            with stream:
                baseline(0)

        return time_calls(enqueue, runner.main_stream(), runner.world.devices[0], iters, warmup, reps, True).median_us

    def check(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False, seed: int | None = None) -> CheckResult:
        with _device_errors_as_purlin():
            return self._check(inst, config, dtype, redop, inplace, seed)

    def _check(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None, inplace: bool, seed: int | None) -> CheckResult:
        program = self.program(inst, config, dtype, redop, inplace)
        runner = self.runner(program, config)
        seed = self.seed if seed is None else seed
        if self.backend == "cupy":
            # Exact inputs checked on the device: a 1 GiB check stays fast.
            from purlin_bench.bench.gpu_check import exact_check

            return exact_check(runner, inst, program, seed)
        return check_program(inst, program, runner, seed=seed)

    def time(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False, iters: int = 20, warmup: int = 5, reps: int = 5, graph: bool = True) -> Timing:
        with _device_errors_as_purlin():
            return self._time(inst, config, dtype, redop, inplace, iters, warmup, reps, graph)

    def _time(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None, inplace: bool, iters: int, warmup: int, reps: int, graph: bool) -> Timing:
        program = self.program(inst, config, dtype, redop, inplace)
        runner = self.runner(program, config)
        if self.backend != "numpy":
            return runner.time(iters=iters, warmup=warmup, reps=reps, graph=graph)
        _, np_dtype = resolve_dtype(dtype)
        inputs = [np.ones(n, dtype=np_dtype) for n in program.in_counts]
        for _ in range(warmup):
            runner.run(inputs)
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            for _ in range(iters):
                runner.run(inputs)
            samples.append((time.perf_counter() - start) / iters * 1e6)
        return Timing(statistics.median(samples), tuple(samples))
