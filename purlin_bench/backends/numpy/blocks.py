"""The CPU reference with each list split over thread blocks, as the GPU runs it.

On the GPU every (rank, channel) list is walked by B thread blocks at once,
each moving its share of every op's elements (atoms/snac.cu, move_op) and
bumping every notify flag once, so a waiter needs B bumps a call. Blocks of
one list are not ordered against each other: block 0 may be two ops ahead of
block 1. A program that is right when a list runs whole can be wrong there:
an op that reads what the op before it wrote, split differently, with no flag
between; a flag counted once where B blocks bump it. The plain reference
(executor.py) cannot see either. This one walks every block of every list on
its own, in a seeded random interleaving, each block moving exactly the
elements the datapath gives it.

Which elements a block moves (the interpreter's rule, and the compiled
datapath's, which decides the same split ahead of time): with every slice
of an op at one offset within 16 bytes (in a variable program's op with one
destination, every source: the destination is then stored element by
element, except 8-byte elements, moved element by element), the elements
before the sources' first 16-byte boundary and after the last full vector
go one by one, element j of those to thread j mod (B*T), and vector v
(VEC = 16 / itemsize elements) to thread v mod (B*T); otherwise element i
to thread i mod (B*T). Thread t is in block t // T. An op is a step's
sources with at most OP_DESTINATIONS of its destinations. Buffers start on
16 bytes (the GPU backend checks it).

Turned on by PURLIN_BLOCK_MODEL=B or BxT (T threads a block, default 2: few
threads make small counts split across blocks) for the numpy backend in one
process; tests use it over every collective and strategy.
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.base.dtypes import accumulate
from purlin_bench.base.errors import DeadlockError, PurlinError
from purlin_bench.program.model import Consume, Notify, Program, Stage
from purlin_bench.program.variable import resolve

MAX_BLOCKS = 64
# A step's destinations go to the datapath in ops of at most this many
# (codegen/lower.py MAX_DST), each split on its own (owners).
OP_DESTINATIONS = 16


def block_model(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(blocks, threads) PURLIN_BLOCK_MODEL asks for, or None (lists whole)."""
    text = (os.environ if environ is None else environ).get("PURLIN_BLOCK_MODEL", "").strip()
    if not text:
        return None
    parts = text.lower().split("x")
    try:
        blocks, threads = int(parts[0]), int(parts[1]) if len(parts) > 1 else 2
    except (ValueError, IndexError):
        blocks = threads = 0
    if len(parts) > 2 or not 1 <= blocks <= MAX_BLOCKS or not 1 <= threads <= 1024:
        raise PurlinError(f"PURLIN_BLOCK_MODEL must be B or BxT (1-{MAX_BLOCKS} blocks, 1-1024 threads), got {text!r}")
    return blocks, threads


def owners(
    count: int, sources: list[int], dests: list[int], itemsize: int, stride: int, variable: bool = False
) -> np.ndarray:
    """The thread (0..stride-1) that moves each of an op's ``count`` elements,
    given its slices' element offsets in their 16-byte-aligned buffers;
    ``variable``: the op is a variable program's (built with SPLIT_LOADS)."""
    i = np.arange(count, dtype=np.int64)
    mis = {(o * itemsize) % 16 for o in sources}
    if len(mis) != 1 or next(iter(mis)) % itemsize:
        return i % stride
    if not {(o * itemsize) % 16 for o in dests} <= mis and not (variable and itemsize < 8 and len(dests) == 1):
        return i % stride  # no SPLIT_LOADS (snac.cu split_of): element by element
    vec = 16 // itemsize
    head = min(count, (16 - next(iter(mis))) % 16 // itemsize)
    nvec = (count - head) // vec
    tail = head + nvec * vec
    out = np.empty(count, dtype=np.int64)
    body = (i >= head) & (i < tail)
    out[body] = ((i[body] - head) // vec) % stride
    edge = ~body
    edge_index = np.where(i < head, i, head + (i - tail))  # the scalar loop's j
    out[edge] = edge_index[edge] % stride
    return out


class BlockSplitRunner(NumpyRunner):
    """A NumpyRunner whose every list is walked by ``blocks`` blocks of
    ``threads`` threads each, in a seeded random interleaving."""

    def __init__(self, program: Program, seed: int = 0, sets: int = 1, blocks: int = 2, threads: int = 2):
        super().__init__(program, seed, sets)
        self.blocks, self.threads = blocks, threads
        self.counts: dict = {}  # flag -> bumps over all calls
        self._masks: dict = {}

    def _mask(self, step, block: int, at: int) -> np.ndarray:
        """Which elements ``block`` moves of the op of ``step`` whose destinations start at ``at``."""
        key = (id(step), block, self._now, at)  # variable sizes: a call's counts decide each op's split
        if key not in self._masks:
            srcs = [step.src] if isinstance(step, Stage) else list(step.srcs)
            chunk = step.dsts[at : at + OP_DESTINATIONS]
            srcs, dsts = ([resolve(r, self._now, self.program.count_caps) for r in refs] for refs in (srcs, chunk))

            def offsets(refs):
                return [self.program.physical(r)[2] for r in refs]

            stride = self.blocks * self.threads
            variable = self.program.variable
            who = owners(srcs[0].count, offsets(srcs), offsets(dsts), self.dtype.itemsize, stride, variable)
            who //= self.threads
            self._masks[key] = (who == block, step)  # the step kept alive: its id stays its own
        return self._masks[key][0]

    def run(self, slot: int = 0) -> None:
        p = self.program
        self._begin(slot)
        need = self.bumps_needed()
        heads = {
            (r, c, b): 0
            for r, chans in enumerate(p.lists)
            for c, steps in enumerate(chans)
            if steps
            for b in range(self.blocks)
        }
        while heads:
            ready = [k for k, i in heads.items() if self._ready(p.lists[k[0]][k[1]][i], need)]
            if not ready:
                raise DeadlockError(
                    f"deadlock in {p.collective}/{p.strategy} with {self.blocks} blocks a list: "
                    f"{self._blocked(heads, need)}"
                )
            key = ready[int(self.rng.integers(len(ready)))]
            rank, channel, block = key
            steps = p.lists[rank][channel]
            self._step(steps[heads[key]], block)
            heads[key] += 1
            if heads[key] == len(steps):
                del heads[key]
        self._outputs[slot] = [self.buffer(r, "out").copy() for r in range(p.ranks)]

    def bumps_needed(self) -> int:
        """What a wait in this call needs of its flag: every block of the
        notifying list bumps it once a call (the datapath's rule)."""
        return self.epoch * self.blocks

    def _ready(self, step, need: int) -> bool:
        return not isinstance(step, Consume) or all(self.counts.get(f, 0) >= need for f in step.waits)

    def _step(self, step, block: int) -> None:
        if isinstance(step, Notify):
            self.counts[step.flag] = self.counts.get(step.flag, 0) + 1
        elif isinstance(step, Stage) and step.dsts:
            for at in range(0, len(step.dsts), OP_DESTINATIONS):
                mask = self._mask(step, block, at)
                for dst in step.dsts[at : at + OP_DESTINATIONS]:
                    self.view(dst)[mask] = self.view(step.src)[mask]
        elif isinstance(step, Consume) and step.op != "wait":
            for at in range(0, len(step.dsts), OP_DESTINATIONS):
                mask = self._mask(step, block, at)
                parts = [self.view(s)[mask] for s in step.srcs]
                redop = self.program.redop or "sum"
                value = parts[0] if step.op == "copy" else accumulate(parts, redop).astype(self.dtype)
                for dst in step.dsts[at : at + OP_DESTINATIONS]:
                    self.view(dst)[mask] = value

    def _blocked(self, heads: dict, need: int) -> str:
        parts = []
        for (rank, channel, block), i in sorted(heads.items())[:8]:
            step = self.program.lists[rank][channel][i]
            missing = [f.text() for f in getattr(step, "waits", ()) if self.counts.get(f, 0) < need]
            parts.append(f"rank {rank} channel {channel} block {block} step {i} waits on {', '.join(missing)}")
        return "; ".join(parts)
