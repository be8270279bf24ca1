"""The CPU reference executor: runs any Program on simulated ranks with NumPy.

It does exactly what the program says and nothing more. Each call advances an
epoch and walks the lists in a seeded random interleaving (any step whose flags
are set may run), so a program that works only in one order is caught; if no
step can run it raises a DeadlockError naming the blocked steps. Outputs and
scratch are poisoned before every call, so a missing Stage shows as wrong data.

A variable-size program takes each call's counts with its inputs (``load``):
they belong to the buffer set, as a GPU keeps them in device memory next to
the buffers. Every slice is resolved against them as its step runs
(program/variable.py), so one prepared runner serves every call's counts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from purlin_bench.backends.port import check_inputs
from purlin_bench.base.dtypes import accumulate, is_integer, resolve_dtype
from purlin_bench.base.errors import ExecutionError
from purlin_bench.program.model import Consume, FlagRef, Program, Ref, Stage
from purlin_bench.program.schedule import Walk
from purlin_bench.program.variable import check_counts, resolve


def poison(buf: np.ndarray) -> None:
    """Fill with a value no correct program produces from check inputs."""
    if is_integer(buf.dtype):
        buf.fill(np.iinfo(buf.dtype).min)
    else:
        buf.fill(np.nan)


class NumpyRunner:
    """A Program on simulated ranks: each buffer set keeps its inputs and the
    outputs of its last call (the port's load / run / outputs)."""

    def __init__(self, program: Program, seed: int = 0, sets: int = 1):
        self.program = program
        self.sets = max(1, sets)
        _, self.dtype = resolve_dtype(program.dtype)
        self.rng = np.random.default_rng(seed)
        self.flags: dict[FlagRef, int] = {}
        self.epoch = 0
        self.memory: dict[tuple[int, str], np.ndarray] = {}
        for r in range(program.ranks):
            for buf in ("in", "out", "scratch"):
                rank, phys, _ = program.physical(Ref(r, buf, 0, 0))
                if (rank, phys) not in self.memory:
                    self.memory[(rank, phys)] = np.empty(program.allocated_count(rank, phys), dtype=self.dtype)
        self._inputs: dict[int, list[np.ndarray]] = {}
        self._outputs: dict[int, list[np.ndarray]] = {}
        self._counts: dict[int, tuple[int, ...]] = {}  # per buffer set: the call's counts (variable sizes)
        self._now: tuple[int, ...] = ()  # the counts of the call running

    def view(self, ref: Ref) -> np.ndarray:
        if ref.symbolic:
            ref = resolve(ref, self._now, self.program.count_caps)
        rank, buf, offset = self.program.physical(ref)
        if buf == "scratch":
            offset += self.program.scratch_shift(self.epoch)  # this call's half of parity scratch
        return self.memory[(rank, buf)][offset : offset + ref.count]

    def buffer(self, rank: int, buf: str) -> np.ndarray:
        return self.view(Ref(rank, buf, 0, self.program.buffer_count(rank, buf)))

    def load(self, inputs: Sequence[np.ndarray], slot: int = 0, counts: Sequence[int] | None = None) -> None:
        check_inputs(self.program, inputs)
        checked = check_counts(self.program, counts)  # before anything is written: one line if they do not fit
        self._inputs[slot] = [np.array(x, dtype=self.dtype) for x in inputs]
        self._counts[slot] = checked

    def loaded_counts(self, slot: int = 0) -> tuple[int, ...] | None:
        """The counts buffer set ``slot`` holds (None: a fixed-size program)."""
        return self._counts.get(slot) if self.program.variable else None

    def _begin(self, slot: int) -> None:
        """A call's start, however its lists are walked: poisoned buffers,
        the slot's inputs and counts in place, the next epoch."""
        if slot not in self._inputs:
            raise ExecutionError(f"buffer set {slot} has no inputs loaded")
        for array in self.memory.values():
            poison(array)
        for r, x in enumerate(self._inputs[slot]):
            self.buffer(r, "in")[...] = x
        self.epoch += 1
        self._now = self._counts.get(slot, ())

    def run(self, slot: int = 0) -> None:
        p = self.program
        self._begin(slot)
        for _, step in Walk(p, self.flags, self.epoch).order(self.rng):
            if isinstance(step, Stage):
                for dst in step.dsts:
                    self.view(dst)[...] = self.view(step.src)
            elif isinstance(step, Consume) and step.op != "wait":
                parts = [self.view(s).copy() for s in step.srcs]
                value = parts[0] if step.op == "copy" else accumulate(parts, p.redop or "sum").astype(self.dtype)
                for dst in step.dsts:
                    self.view(dst)[...] = value
        self._outputs[slot] = [self.buffer(r, "out").copy() for r in range(p.ranks)]

    def outputs(self, slot: int = 0) -> list[np.ndarray]:
        if slot not in self._outputs:
            raise ExecutionError(f"buffer set {slot} has not run yet")
        return [x.copy() for x in self._outputs[slot]]

    def candidate(self) -> "Call":
        return Call(lambda i: self.run(i % self.sets))

    def close(self) -> None:
        self.memory.clear()
        self._inputs.clear()
        self._outputs.clear()


class Call:
    """A timing candidate on the CPU: ``call(i)`` runs call ``i`` to completion."""

    def __init__(self, call):
        self.call = call
