"""One kernel launch of a runner: the ranks it runs, its step table, epochs,
status words and the arguments it is launched with."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from purlin_bench.backends.cupy.lower import Lowered
from purlin_bench.backends.cupy.status import pool as status_pool

if TYPE_CHECKING:
    from purlin_bench.backends.cupy.executor import CupyRunner


def _np_storage(dtype: np.dtype) -> np.dtype:
    """CuPy has no bfloat16: device arrays of it are held as uint16 bits."""
    return np.dtype(np.uint16) if dtype.name == "bfloat16" else dtype


class _Launch:
    """One kernel launch: the ranks it runs, its table, epochs and status."""

    def __init__(self, runner: "CupyRunner", ranks: list[int], lowered: Lowered):
        import cupy

        self.device = runner.world.devices[ranks[0]]
        self.ranks = ranks
        self.lowered = lowered
        with cupy.cuda.Device(self.device):
            self.ops = cupy.asarray(lowered.ops.view(np.uint8))
            self.groups = cupy.asarray(lowered.groups)
            self.grid = lowered.group_count * runner.blocks
            self.epochs = cupy.zeros(max(1, self.grid), dtype=cupy.uint64)
            self.compiled = runner.compiled and bool(lowered.group_count)
            self.kernel, self.params = (
                runner.compiled_kernel(self.device, ranks) if self.compiled else (runner.kernel(self.device), ())
            )
            self.stream = cupy.cuda.Stream(non_blocking=True)
            # Taken after all that can fail (the kernel's build): a launch
            # that fails to be made holds no slot.
            self.slot = status_pool().slot()
            self.status = self.slot.device
            # A launch whose blocks wait on flags relies on all of them being
            # resident at once (a group's notify counts every block, and a
            # rank's groups wait on each other): a cooperative launch is
            # what guarantees that of its own grid, or fails at once.
            self.cooperative = bool(len(lowered.ops)) and bool((lowered.ops["nwait"] > 0).any())
            self.sizes = None if lowered.sizes is None else cupy.asarray(lowered.sizes)
        self.args: list[tuple] = []  # a compiled kernel's bases per buffer set (CupyRunner fills them)
        self.arg_cache: dict[int, tuple] = {}

    def arguments(self, runner: "CupyRunner", slot: int) -> tuple:
        """This launch's arguments for buffer set ``slot``, made once: a
        serving stack calls every step, and building them cost host time."""
        made = self.arg_cache.get(slot)
        if made is None:
            if self.compiled:
                made = (*self.args[slot], self.epochs, self.status, runner.abort, np.uint64(runner.timeout_ns))
            else:
                made = (
                    self.ops,
                    self.groups,
                    runner.bases[slot][self.device],
                    self.epochs,
                    self.status,
                    runner.abort,
                    np.uint64(runner.timeout_ns),
                    np.int32(runner.blocks),
                    np.int32(3 * runner.program.ranks),
                    *self._counts(runner, slot),
                )
            self.arg_cache[slot] = made
        return made

    def _counts(self, runner: "CupyRunner", slot: int) -> tuple:
        """The kernel's counts and size table (null pointers for fixed sizes)."""
        if self.sizes is None:
            return (np.uint64(0), np.uint64(0))
        return (np.uint64(runner.counts_of(self.ranks[0], slot)), self.sizes)
