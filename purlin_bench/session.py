"""One place that turns (collective, size, dtype, configuration) into checked
outputs and timings on a backend. ``purlin check``, ``purlin bench`` and
``purlin tune`` all go through a Session, so they measure the same way.

Backends: ``numpy`` (CPU reference; its times are CPU times of the reference,
useful only to exercise the tools) and ``cupy`` (GPU; see executors/cupy_exec).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from purlin_bench.check import CheckResult, check_program
from purlin_bench.config import RunConfig
from purlin_bench.dtypes import resolve_dtype
from purlin_bench.errors import PurlinError
from purlin_bench.executors import get_executor, gpu_available
from purlin_bench.planner import plan
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance, instantiate
from purlin_bench.spec.loader import CollectiveSpec
from purlin_bench.timing import Timing


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

    def describe(self) -> str:
        if self.backend == "numpy":
            return f"numpy CPU reference, {self.ranks} simulated ranks"
        return self.executor.describe(self.ranks)

    def instance(self, spec: CollectiveSpec, count: int, dtype: str, root: int = 0) -> Instance:
        _, np_dtype = resolve_dtype(dtype)
        return instantiate(spec, self.ranks, count, np_dtype.itemsize, root)

    def program(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False) -> Program:
        return plan(inst, config.strategy, dtype, redop, dict(config.plan_params), inplace)

    def runner(self, program: Program, config: RunConfig):
        return self.executor.prepare(program, **dict(config.exec_params)) if config.exec_params else self.executor.prepare(program)

    def check(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False, seed: int | None = None) -> CheckResult:
        program = self.program(inst, config, dtype, redop, inplace)
        return check_program(inst, program, self.runner(program, config), seed=self.seed if seed is None else seed)

    def time(self, inst: Instance, config: RunConfig, dtype: str, redop: str | None = None, inplace: bool = False, iters: int = 20, warmup: int = 5, reps: int = 5, graph: bool = True) -> Timing:
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
