"""Run programs on random inputs and compare with the spec's reference.

:func:`compare` counts wrong elements with each dtype's rounding allowed;
:func:`check_program` runs a program on random floats through any runner of
the backend port (the tests' strongest check of the CPU reference). The
tools check on exact inputs instead (purlin_bench.measurement)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from purlin_bench.dtypes import count_wrong, random_inputs, reduction_tolerance, resolve_dtype
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance


@dataclass(frozen=True)
class CheckResult:
    wrong: int  # output elements that differ from the reference
    total: int  # output elements compared

    @property
    def ok(self) -> bool:
        return self.wrong == 0


def compare(inst: Instance, program: Program, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> CheckResult:
    """Count output elements that differ from the reference: copies bit for bit,
    reductions within the dtype's accumulated rounding (see dtypes)."""
    _, dtype = resolve_dtype(program.dtype)
    expected = inst.reference(inputs, program.redop)
    wrong = total = 0
    for rank, layout in enumerate(inst.outputs):
        for key, place in layout:
            lo, hi = place.offset, place.offset + place.count
            tol = None
            if inst.op == "reduce":
                parts = [inputs[s.rank][s.offset : s.offset + s.count] for s in inst.sources_of(key)]
                tol = reduction_tolerance(parts, program.redop or "sum", dtype)
            wrong += count_wrong(outputs[rank][lo:hi], expected[rank][lo:hi], tol)
            total += place.count
    return CheckResult(wrong, total)


def check_program(inst: Instance, program: Program, runner: Any, seed: int = 0, calls: int = 2) -> CheckResult:
    """Run ``program`` ``calls`` times with fresh random inputs (so epoch
    counters are exercised) and return the worst comparison."""
    _, dtype = resolve_dtype(program.dtype)
    rng = np.random.default_rng(seed)
    worst = CheckResult(0, 0)
    for _ in range(calls):
        inputs = random_inputs(rng, program.in_counts, dtype, program.redop)
        runner.load(inputs, 0)  # the backend port's Runner, duck-typed: this layer is below it
        runner.run(0)
        outputs = runner.outputs(0)
        result = compare(inst, program, inputs, outputs)
        if result.wrong >= worst.wrong:
            worst = result
    return worst
