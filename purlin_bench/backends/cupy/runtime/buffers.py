"""A runner's buffers: the slice base tables its kernels read, typed views
of every rank's buffers, inputs and a variable program's counts in, poison,
outputs out. A mixin of CupyRunner (runner.py), which owns the state it
uses: program, world, launches, sets, itemsize, storage, counts, loaded."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from purlin_bench.backends.cupy.codegen.lower import buffer_index
from purlin_bench.base.errors import ExecutionError
from purlin_bench.program.model import Ref
from purlin_bench.program.variable import check_counts


class RunnerBuffers:
    def _physical_bytes(self, rank: int, buf: str) -> int:
        return self.program.allocated_count(rank, buf) * self.itemsize

    def _base_table(self, slot: int) -> dict[int, object]:
        """Per launch device: a device array of 3R pointers (in, out, scratch per rank)."""
        import cupy

        p, ptrs = self.program, []
        where = [p.physical(Ref(r, buf, 0, 0)) for r in range(p.ranks) for buf in ("in", "out", "scratch")]
        needs = list(dict.fromkeys((rank, phys, self._physical_bytes(rank, phys)) for rank, phys, _ in where))
        private = p.parity_scratch and p.scratch_count
        bases = self.world.buffers(slot, [n for n in needs if not (private and n[1] == "scratch")])
        if private:
            # Parity scratch of its own, never the arena's that other runners
            # share: a peer writes it without waiting for this rank to be in
            # the call, so it must be this runner's calls alone that use it.
            words = -(-self._physical_bytes(0, "scratch") // 8)
            for rank, array in enumerate(self.world.symmetric_words([words] * p.ranks)):
                bases[(rank, "scratch")] = array
        for rank, phys, offset in where:
            base = bases[(rank, phys)]
            # Held, not just addressed: a later runner of this world may
            # need it larger, and the world then replaces it; this
            # runner's table must not point into freed memory (a bench
            # keeps the default's runner beside the one under test).
            self._held.append(base)
            if base.data.ptr % self.kind.base_align:
                # A generated kernel's vector splits assume it (codegen/compiled.py's BaseLayout).
                raise ExecutionError(
                    f"rank {rank}'s {phys} buffer starts at {base.data.ptr:#x}, not on {self.kind.base_align} bytes: "
                    f"the {self.kind.label} datapath needs aligned buffers"
                )
            ptrs.append(base.data.ptr + offset * self.itemsize)
        table = np.array(ptrs, dtype=np.uint64)
        out = {}
        for launch in self.launches:
            if launch.device not in out:
                with cupy.cuda.Device(launch.device):
                    out[launch.device] = cupy.asarray(table)
        return {"host": table, **out}

    # -- buffers ---------------------------------------------------------------
    def _address(self, ref: Ref, slot: int) -> int:
        """Device address of a slice in buffer set ``slot`` (the same table the kernel reads)."""
        return int(self.bases[slot]["host"][buffer_index(ref)]) + ref.offset * self.itemsize

    def array(self, rank: int, buf: str, slot: int = 0, allocated: bool = False):
        """A typed device view of one rank's buffer in buffer set ``slot``
        (``allocated``: all of it, both halves of parity scratch)."""
        import cupy

        n = (self.program.allocated_count if allocated else self.program.buffer_count)(rank, buf)
        ptr = self._address(Ref(rank, buf, 0, 0), slot)
        mem = cupy.cuda.UnownedMemory(ptr, max(1, n * self.itemsize), self, self.world.devices[rank])
        return cupy.ndarray((n,), dtype=self.storage, memptr=cupy.cuda.MemoryPointer(mem, 0))

    def load(self, inputs: Sequence[np.ndarray], slot: int = 0, counts: Sequence[int] | None = None) -> None:
        """Inputs of this process's ranks (the others' are ignored), and a
        variable program's counts for buffer set ``slot``, checked first."""
        import cupy

        checked = check_counts(self.program, counts)
        if self.program.variable:
            self.loaded[slot] = checked
            values = np.array(checked, dtype=np.int64)
            for rank, array in enumerate(self.counts):
                with cupy.cuda.Device(self.world.devices[rank]):
                    array[slot % self.sets].set(values)
        for r, x in enumerate(inputs):
            if x.shape != (self.program.in_counts[r],):
                raise ExecutionError(f"input of rank {r} has shape {x.shape}, expected ({self.program.in_counts[r]},)")
            with cupy.cuda.Device(self.world.devices[r]):
                self.array(r, "in", slot).set(np.ascontiguousarray(x).view(self.storage))
        # Another process's kernel reads these next: they must have landed.
        self.synchronize()

    def loaded_counts(self, slot: int = 0) -> tuple[int, ...] | None:
        """The counts buffer set ``slot`` was loaded with (None: fixed sizes)."""
        return self.loaded.get(slot) if self.program.variable else None

    def counts_address(self, slot: int = 0) -> int:
        """Where the kernel of this process reads buffer set ``slot``'s
        counts (int64, one per chunk name): a caller whose counts are
        computed on the GPU copies them there on its stream, graph-safe."""
        if not self.program.variable:
            raise ExecutionError(f"{self.program.collective} has fixed sizes; it takes no per-call counts")
        return self.counts_of(self.launches[0].ranks[0], slot)

    def counts_of(self, rank: int, slot: int) -> int:
        """The address of rank ``rank``'s counts for buffer set ``slot`` (a fused launch reads rank 0's)."""
        return int(self.counts[rank][slot % self.sets].data.ptr)

    def poison(self, slot: int = 0) -> None:
        """All-ones bytes (NaN for floats, -1 for ints) in outputs and scratch,
        outside in-place inputs, so unwritten elements show as wrong."""
        import cupy

        p = self.program
        # Only the ranks this process runs: a peer process poisons its own
        # before its ready notify, after which others may write into them.
        # Parity scratch has no such notify (a peer already in this call may
        # be writing it), so it is poisoned, both halves, only where every
        # rank runs here and so has finished the last call.
        whole = self.world.local_ranks == tuple(range(p.ranks))
        for r in self.world.local_ranks:
            with cupy.cuda.Device(self.world.devices[r]):
                if p.scratch_count and (whole or not p.parity_scratch):
                    self.array(r, "scratch", slot, allocated=True).view(cupy.uint8).fill(0xFF)
                out = self.array(r, "out", slot).view(cupy.uint8)
                if p.inplace_offsets is None or p.out_counts[r] < p.in_counts[r]:
                    if p.inplace_offsets is None:
                        out.fill(0xFF)
                    continue
                lo, hi = p.inplace_offsets[r] * self.itemsize, (p.inplace_offsets[r] + p.in_counts[r]) * self.itemsize
                out[:lo].fill(0xFF)
                out[hi:].fill(0xFF)

    def outputs(self, slot: int = 0) -> list[np.ndarray]:
        import cupy

        outs = []
        for r in range(self.program.ranks):
            with cupy.cuda.Device(self.world.devices[r]):
                outs.append(cupy.asnumpy(self.array(r, "out", slot)).view(self.dtype))
        return outs
