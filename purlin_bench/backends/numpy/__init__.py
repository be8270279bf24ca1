"""The CPU reference as a backend: simulated ranks in NumPy, on any machine.

Its times are CPU wall-clock times of the reference executor, labelled so
(``timing_kind``); they exercise the tools, they say nothing of a GPU. Its
baseline is the spec's NumPy reference itself (purlin_bench/baselines/reference.py).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from purlin_bench.backends.numpy.blocks import BlockSplitRunner, block_model
from purlin_bench.backends.numpy.executor import Call, NumpyRunner
from purlin_bench.backends.numpy.ranks import RankRunner
from purlin_bench.backends.port import VIRTUAL, Backend, TimingPolicy, check_params, take_turns
from purlin_bench.base.dtypes import DTYPES, count_wrong
from purlin_bench.base.hardware import Fingerprint, cpu_model, layout_slug, procs_layout_slug
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance
from purlin_bench.spec.variable import expected_outputs
from purlin_bench.base.timing import Timing


class HostReference:
    """Expected outputs on the host; the baseline is computing them again.

    With variable sizes the expected outputs are of the counts the runner's
    buffer set holds, and only each output's part that the call fills (its
    chunks at those counts, packed) is compared: the rest is not the call's."""

    def __init__(self, inst: Instance, redop: str | None, inputs: Sequence[np.ndarray]):
        self.inst, self.redop, self.inputs = inst, redop, list(inputs)
        self.expected = None if inst.variable else inst.reference(self.inputs, redop)

    def count_wrong(self, runner: Any, slot: int = 0) -> int:
        expected = self.expected
        if self.inst.variable:
            expected = expected_outputs(self.inst, self.inputs, self.redop, runner.loaded_counts(slot))
        outputs = runner.outputs(slot)
        return sum(count_wrong(a[: len(b)], b, None) for a, b in zip(outputs, expected))

    def baseline(self, name: str) -> Call:
        from purlin_bench import baselines

        # Simulated ranks are every rank in one process: the virtual layout.
        return baselines.make(name, baselines.Site(NumpyBackend.name, VIRTUAL, None, self.inst, reference=self))


class NumpyBackend(Backend):
    name = "numpy"
    description = "numpy CPU reference"
    timing_kind = "cpu-reference"
    has_devices = False
    runs_in_procs = True
    variable_sizes = True
    dtypes = tuple(DTYPES)
    default_bench_max = "1M"
    # A default tune must end in about a minute on 2 cores (issue 15): the
    # small buckets, and fewer trials than a GPU sweep asks (the reference
    # takes ~0.6 s a trial at 8 ranks; 64 trials a study took 40 s each).
    default_tune_max = "64K"
    default_tune_trials = 12
    # One call a batch: the reference takes milliseconds, and its times
    # only exercise the path.
    trial_policy = TimingPolicy(iters=1, warmup=1, reps=3)

    def __init__(self, ranks: int, gpus: tuple[int, ...] | None = None, seed: int = 0, procs: Any = None):
        super().__init__(ranks, gpus, seed, procs)
        self._prepared = 0
        # The test mode that walks each list as the GPU's thread blocks do (blocks.py).
        self.block_model = None if procs else block_model()

    @classmethod
    def available(cls) -> str | None:
        return None

    def describe(self) -> str:
        if self.procs:
            return f"numpy CPU reference, {self.ranks} rank{'s' if self.ranks != 1 else ''} in shared memory"
        split = (
            f", each list split over {self.block_model[0]} blocks of {self.block_model[1]} threads"
            if self.block_model
            else ""
        )
        return f"numpy CPU reference, {self.ranks} simulated rank{'s' if self.ranks != 1 else ''}{split}"

    def fingerprint(self) -> Fingerprint:
        model = cpu_model()
        procs = self.procs is not None
        return Fingerprint(
            backend=self.name,
            gpu_type="cpu",
            layout=procs_layout_slug(self.ranks, None) if procs else layout_slug(self.ranks, 1, False),
            ranks=self.ranks,
            link=f"{self.ranks} processes on the CPU over shared memory (numpy reference)"
            if procs
            else f"{self.ranks} simulated ranks on the CPU (numpy reference)",
            device_name=model,
            cpu_model=model,
        )

    def environment(self) -> dict[str, Any]:
        import platform

        return {**super().environment(), "cpu": platform.processor() or platform.machine()}

    # The caps of time() below, named once so the label cannot drift from them.
    MAX_ITERS, MAX_WARMUP_CALLS, MAX_REPS = 3, 1, 3

    def time_label(self, policy: TimingPolicy) -> str:
        # What time() does with the policy, so bench's header says the timing actually done.
        iters, reps, warm = (
            min(policy.iters, self.MAX_ITERS),
            min(policy.reps, self.MAX_REPS),
            min(policy.warmup, self.MAX_WARMUP_CALLS),
        )
        capped = " (capped on the CPU)" if (iters, reps, warm) != (policy.iters, policy.reps, policy.warmup) else ""
        graphs = "; no CUDA graphs" if policy.graph else ""
        calls = f"{warm} warm-up call{'s' if warm != 1 else ''}"
        return f"CPU wall clock, {iters} calls per batch, {calls}, median of {reps} batches{capped}{graphs}"

    def prepare(self, program: Program, sets: int = 1, **params: Any) -> NumpyRunner | RankRunner:
        check_params(type(self), params)
        if self.procs:
            self._prepared += 1  # the same count on every rank: the shared files' names
            return RankRunner(program, self.procs, sets, tag=f"p{self._prepared}")
        if self.block_model:
            return BlockSplitRunner(program, self.seed, sets, *self.block_model)
        return NumpyRunner(program, self.seed, sets)

    def reference(self, runner: Any, inst: Instance, inputs: Sequence[np.ndarray]) -> HostReference:
        return HostReference(inst, runner.program.redop, inputs)

    def time(self, candidates: Sequence[Call], policy: TimingPolicy, between=None) -> list[Timing]:
        # Capped: a 1 MiB reference call takes milliseconds, and a bench of
        # 20 x 5 calls a size would take minutes for numbers that mean little.
        iters, reps = min(policy.iters, self.MAX_ITERS), min(policy.reps, self.MAX_REPS)
        for c in candidates:
            for i in range(min(policy.warmup, self.MAX_WARMUP_CALLS)):
                c.call(i)

        def batch_of(c: Call):
            def batch() -> float:
                start = time.perf_counter()
                for i in range(iters):
                    c.call(i)
                return (time.perf_counter() - start) / iters * 1e6

            return batch

        samples = take_turns([batch_of(c) for c in candidates], reps, between)
        return [Timing(float(np.median(s)), tuple(s)) for s in samples]


BACKEND = NumpyBackend
