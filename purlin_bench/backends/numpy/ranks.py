"""The CPU reference with one process per rank, over shared memory.

Every rank's buffers (each buffer set's in, out and scratch) and flag words
live in files of the run's private folder (procs/shm.py), mapped by every
process of the run and unlinked as soon as all have mapped them, so a
killed run leaves nothing behind. A rank runs only its own lists: any of
its channels whose next step's flags are set may go, so the channels of one
rank never wait on each other (as the GPU's blocks do not); a wait that runs
past the watchdog raises a WatchdogTimeout naming rank, channel, step and flag.

Memory order: a Notify is a plain 8-byte store to the peer's flag word after
the data stores of the steps before it. x86-64 keeps stores in program order
as seen by other cores (and a load is not passed by a later load), which is
all the release/acquire pairing the protocol needs there; only one process
ever writes a given flag word (one notifier a flag), so the increment needs
no atomic read-modify-write.
"""

from __future__ import annotations

import platform
import time
from typing import Sequence

import numpy as np

from purlin_bench.backends.numpy.executor import Call, poison
from purlin_bench.backends.port import check_inputs
from purlin_bench.procs.shm import Segment
from purlin_bench.base.dtypes import accumulate, resolve_dtype
from purlin_bench.base.errors import ExecutionError, WatchdogTimeout
from purlin_bench.program.model import Consume, Notify, Program, Ref, Stage
from purlin_bench.program.variable import check_counts, resolve

BUFFERS = ("in", "out", "scratch")
# Spinning on two CI cores starves the very peer a rank waits for: after a
# few empty polls a waiter sleeps, up to this long.
_MAX_NAP_S = 0.001
# How often a waiting rank asks the store whether the run was stopped.
_LOOK_S = 0.2
# Where plain stores are seen by other cores in program order (see above).
STORE_ORDERED = ("x86_64", "amd64", "i386", "i686")


def check_store_order(machine: str) -> None:
    """Refuse processors that may reorder stores (Arm, POWER): there a peer
    could see a flag before the data it releases, and Python has no fence."""
    if machine.lower() not in STORE_ORDERED:
        raise ExecutionError(
            f"the CPU reference with one process per rank needs x86's store order; this is"
            f" {machine or 'an unknown processor'}: run its ranks in one process (without --procs)"
        )


class RankRunner:
    """Rank ``procs.rank``'s part of ``program`` over ``sets`` buffer sets
    shared with every other process of the run (the port's Runner)."""

    def __init__(self, program: Program, procs, sets: int, tag: str):
        check_store_order(platform.machine())
        self.program, self.procs, self.sets = program, procs, max(1, sets)
        self.rank = procs.rank
        _, self.dtype = resolve_dtype(program.dtype)
        self.epoch = 0
        self._segments: list[Segment] = []
        self._layout = self._buffer_layout()
        per_set = sum(n for _, n in self._layout.values()) or 1
        group = procs.group
        # A rank's flag words, then (variable sizes) each buffer set's counts:
        # they belong to the set, as on a GPU, so whoever loads the inputs
        # (rank 0 driving the others) loads them for every rank.
        ncounts = len(program.count_caps)
        words = [max(1, program.flag_counts[r]) + self.sets * ncounts for r in range(program.ranks)]
        mine = [Segment.create(procs.folder, f"{tag}-r{self.rank}-flags", 8 * words[self.rank])]
        mine += [
            Segment.create(procs.folder, f"{tag}-r{self.rank}-s{s}", per_set * self.dtype.itemsize)
            for s in range(self.sets)
        ]
        self._segments += mine
        try:
            group.barrier(f"{tag}-created")
            self.flags, self.memory, self.counts = [], [], []
            for r in range(program.ranks):
                flags = mine[0] if r == self.rank else self._open(f"{tag}-r{r}-flags", 8 * words[r])
                both = np.frombuffer(flags.buffer, dtype=np.uint64)
                nflags = max(1, program.flag_counts[r])
                self.flags.append(both[:nflags])
                self.counts.append(both[nflags:].reshape(self.sets, ncounts))
                sets_of_r = (
                    mine[1:]
                    if r == self.rank
                    else [self._open(f"{tag}-r{r}-s{s}", per_set * self.dtype.itemsize) for s in range(self.sets)]
                )
                self.memory.append([np.frombuffer(seg.buffer, dtype=self.dtype) for seg in sets_of_r])
            group.barrier(f"{tag}-mapped")
        finally:
            for seg in mine:
                seg.unlink()  # every process has it mapped (or the run failed): no file outlives the run
        self.flags[self.rank][:] = 0
        if program.parity_scratch:  # both halves: _poison reaches each only a call ahead
            at, n = self._layout[(self.rank, "scratch")]
            for memory in self.memory[self.rank]:
                poison(memory[at : at + n])
        self.heads = [0] * len(program.lists[self.rank])
        self._now: tuple[int, ...] = ()  # the running call's counts: they resolve each slice

    def _open(self, name: str, nbytes: int) -> Segment:
        seg = Segment.open(self.procs.folder, name, nbytes)
        self._segments.append(seg)
        return seg

    def _buffer_layout(self) -> dict[tuple[int, str], tuple[int, int]]:
        """(rank, physical buffer) -> (offset, elements) within a rank's set."""
        p, out = self.program, {}
        for r in range(p.ranks):
            at = 0
            for buf in BUFFERS:
                rank, phys, _ = p.physical(Ref(r, buf, 0, 0))
                if (rank, phys) not in out:
                    n = p.allocated_count(rank, phys)
                    out[(rank, phys)] = (at, n)
                    at += n
        return out

    def view(self, ref: Ref, slot: int) -> np.ndarray:
        if ref.symbolic:
            ref = resolve(ref, self._now, self.program.count_caps)
        rank, buf, offset = self.program.physical(ref)
        base, _ = self._layout[(rank, buf)]
        if buf == "scratch":
            base += self.program.scratch_shift(self.epoch)  # the running call's half of parity scratch
        return self.memory[rank][slot][base + offset : base + offset + ref.count]

    def buffer(self, rank: int, buf: str, slot: int) -> np.ndarray:
        return self.view(Ref(rank, buf, 0, self.program.buffer_count(rank, buf)), slot)

    # -- the port -------------------------------------------------------------
    def load(self, inputs: Sequence[np.ndarray], slot: int = 0, counts: Sequence[int] | None = None) -> None:
        check_inputs(self.program, inputs)
        checked = check_counts(self.program, counts)
        for r in range(self.program.ranks):
            self.counts[r][slot % self.sets] = checked
        for r, x in enumerate(inputs):
            self.buffer(r, "in", slot)[...] = x

    def outputs(self, slot: int = 0) -> list[np.ndarray]:
        return [self.buffer(r, "out", slot).copy() for r in range(self.program.ranks)]

    def loaded_counts(self, slot: int = 0) -> tuple[int, ...] | None:
        if not self.program.variable:
            return None
        return tuple(int(v) for v in self.counts[self.rank][slot % self.sets])

    def run(self, slot: int = 0) -> None:
        self._poison(slot)
        self._now = self.loaded_counts(slot) or ()
        self.epoch += 1
        self._walk(slot)

    def _poison(self, slot: int) -> None:
        """Outputs and scratch of this rank, outside an in-place input: peers
        write them only after this rank's ready notify, which comes later.
        Parity scratch has no such notify: a peer already in the call about
        to run (e) may be writing its half, so this poisons the other half,
        the one call e + 1 uses, which no peer can write before this rank's
        data of call e goes out."""
        p, r = self.program, self.rank
        if p.parity_scratch:
            base = self._layout[(r, "scratch")][0] + p.scratch_shift(self.epoch + 2)
            poison(self.memory[r][slot][base : base + p.scratch_count])
        elif p.scratch_count:
            poison(self.buffer(r, "scratch", slot))
        out = self.buffer(r, "out", slot)
        if p.inplace_offsets is None:
            poison(out)
        elif p.out_counts[r] >= p.in_counts[r]:
            lo, hi = p.inplace_offsets[r], p.inplace_offsets[r] + p.in_counts[r]
            poison(out[:lo])
            poison(out[hi:])

    def _walk(self, slot: int) -> None:
        lists = self.program.lists[self.rank]
        heads = [0] * len(lists)
        since, naps = time.monotonic(), 0
        looked = since
        while any(h < len(steps) for h, steps in zip(heads, lists)):
            moved = False
            for c, steps in enumerate(lists):
                while heads[c] < len(steps) and self._ready(steps[heads[c]]):
                    self._step(steps[heads[c]], slot)
                    heads[c] += 1
                    moved = True
            if moved:
                since, naps = time.monotonic(), 0
                continue
            now = time.monotonic()
            if now - looked > _LOOK_S:
                # A dead peer (the launcher aborts the run) or a peer that
                # failed this call: stop now, not at the watchdog.
                looked = now
                self.procs.group.check_cancelled(
                    f"rank {self.rank} stopped waiting in {self.program.collective}/{self.program.strategy}"
                )
            if now - since > self.procs.watchdog_s:
                self._timeout(lists, heads, now - since)
            naps += 1
            time.sleep(0 if naps < 50 else min(_MAX_NAP_S, 1e-5 * naps))
        self.heads = heads

    def _ready(self, step) -> bool:
        if isinstance(step, Consume):
            return all(int(self.flags[f.rank][f.index]) >= self.epoch for f in step.waits)
        return True

    def _step(self, step, slot: int) -> None:
        if isinstance(step, Stage):
            for dst in step.dsts:
                self.view(dst, slot)[...] = self.view(step.src, slot)
        elif isinstance(step, Notify):
            self.flags[step.flag.rank][step.flag.index] += np.uint64(1)
        elif isinstance(step, Consume) and step.op != "wait":
            parts = [self.view(s, slot).copy() for s in step.srcs]
            value = parts[0] if step.op == "copy" else accumulate(parts, self.program.redop or "sum").astype(self.dtype)
            for dst in step.dsts:
                self.view(dst, slot)[...] = value

    def _timeout(self, lists, heads, waited: float) -> None:
        for c, steps in enumerate(lists):
            if heads[c] < len(steps):
                step = steps[heads[c]]
                flag = next((f for f in step.waits if int(self.flags[f.rank][f.index]) < self.epoch), None)
                if flag is None:
                    return  # its notify came just now: the walk goes on
                value = int(self.flags[flag.rank][flag.index])
                raise WatchdogTimeout(
                    f"watchdog: rank {self.rank} channel {c} step {heads[c]} waited {waited:.1f} s on {flag.text()} "
                    f"(value {value}, needed {self.epoch}) in {self.program.collective}/{self.program.strategy};"
                    " its notify never came"
                )

    def reset(self) -> None:
        """After a failed call on any rank (every rank has left it): zero this
        rank's flags and the epoch, as every other rank does with its own."""
        self.flags[self.rank][:] = 0
        self.epoch = 0

    def candidate(self) -> Call:
        return Call(lambda i: self.run(i % self.sets))

    def close(self) -> None:
        self.flags, self.memory, self.counts = [], [], []
        for seg in self._segments:
            seg.close()
        self._segments.clear()
