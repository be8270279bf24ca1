"""Run programs on random inputs and compare with the spec's reference.

:func:`compare` counts wrong elements with each dtype's rounding allowed;
:func:`check_program` runs a program on random floats through any runner of
the backend port (the tests' strongest check of the CPU reference). The
tools check on exact inputs instead (purlin_bench.measure.service).
:func:`partial_overflow` names one known cause of wrong elements: a strategy
that keeps partial results in the buffer dtype (the ring) overflows a
float16 partial where a single reduction would not (40000 + 40000 - 40000)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from purlin_bench.base.dtypes import (
    accumulate,
    count_wrong,
    is_integer,
    random_inputs,
    reduction_tolerance,
    resolve_dtype,
)
from purlin_bench.program.model import Program
from purlin_bench.spec.instance import Instance
from purlin_bench.spec.variable import at_counts, draw_counts


@dataclass(frozen=True)
class CheckResult:
    wrong: int  # output elements that differ from the reference
    total: int  # output elements compared
    overflowed: int = 0  # of the outputs, those whose reduction overflows in a partial (partial_overflow)

    @property
    def ok(self) -> bool:
        return self.wrong == 0

    def note(self, dtype: str) -> str:
        """What a failed check says: how many differ, and the overflow cause."""
        if self.ok:
            return ""
        text = f"{self.wrong} of {self.total} output elements differ from the reference"
        if self.overflowed:
            text += (
                f"; {self.overflowed} can overflow {dtype} in a partial sum in ring order "
                f"(partials are kept in {dtype}; the reference's result fits)"
            )
        return text


def partial_overflow(inst: Instance, redop: str | None, dtype: np.dtype, inputs: list[np.ndarray]) -> int:
    """Output elements of a float sum or product whose reference fits in
    ``dtype`` but whose partial result, accumulated in the order a ring
    visits the ranks (starting at any rank) and rounded to ``dtype`` at every
    hop as the ring stores it, overflows. The reference accumulates in
    float64, so such elements are wrong for the ring's datapath, not for its
    schedule."""
    redop = redop or "sum"
    if inst.op != "reduce" or redop not in ("sum", "prod") or is_integer(dtype):  # integers wrap by design
        return 0
    count = 0
    for layout in inst.outputs:
        for key, place in layout:
            sources = inst.sources_of(key)
            if not place.count or len(sources) < 2:
                continue
            with np.errstate(over="ignore"):
                final = np.isfinite(
                    accumulate([inputs[s.rank][s.offset : s.offset + s.count] for s in sources], redop)
                    .astype(dtype)
                    .astype(np.float64)
                )
            bad = np.zeros(place.count, dtype=bool)
            for start in range(inst.ranks):
                ordered = sorted(sources, key=lambda s: ((s.rank - start) % inst.ranks, s.offset))
                acc = inputs[ordered[0].rank][ordered[0].offset : ordered[0].offset + place.count]
                for s in ordered[1:]:
                    with np.errstate(over="ignore"):  # the overflow is what is looked for
                        acc = accumulate([acc, inputs[s.rank][s.offset : s.offset + place.count]], redop).astype(dtype)
                    bad |= ~np.isfinite(acc.astype(np.float64))
            count += int(np.count_nonzero(bad & final))
    return count


def compare(
    inst: Instance,
    program: Program,
    inputs: list[np.ndarray],
    outputs: list[np.ndarray],
    counts: Sequence[int] | None = None,
) -> CheckResult:
    """Count output elements that differ from the reference: copies bit for bit,
    reductions within the dtype's accumulated rounding (see dtypes). With
    variable sizes, of the call with ``counts``: its chunks, packed."""
    _, dtype = resolve_dtype(program.dtype)
    if inst.variable:
        inst = at_counts(inst, counts)  # the call's own instance: chunks at its counts
        inputs = [x[:n] for x, n in zip(inputs, inst.in_counts)]
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
    overflowed = partial_overflow(inst, program.redop, dtype, inputs) if wrong else 0
    return CheckResult(wrong, total, overflowed)


def check_program(
    inst: Instance, program: Program, runner: Any, seed: int = 0, calls: int = 2, counts: str = "uniform"
) -> CheckResult:
    """Run ``program`` ``calls`` times with fresh random inputs (so epoch
    counters are exercised) and return the worst comparison. With variable
    sizes each call draws its counts from the distribution ``counts``."""
    _, dtype = resolve_dtype(program.dtype)
    rng = np.random.default_rng(seed)
    worst = CheckResult(0, 0)
    for _ in range(calls):
        inputs = random_inputs(rng, program.in_counts, dtype, program.redop)
        sizes = draw_counts(inst, counts, rng) if inst.variable else None
        # The backend port's Runner, duck-typed: this layer is below it.
        runner.load(inputs, 0, **({"counts": sizes} if sizes is not None else {}))
        runner.run(0)
        outputs = runner.outputs(0)
        result = compare(inst, program, inputs, outputs, sizes)
        if result.wrong >= worst.wrong:
            worst = result
    return worst
