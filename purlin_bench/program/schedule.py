"""Walk a program the way any executor may: each (rank, channel) list in order,
a list's next step runnable once every flag it waits on has been notified.

Shared by the validator (which walks in a fixed order to prove the program
deadlock-free) and the NumPy executor (which walks in a seeded random order, so
that a program that only works in one interleaving is caught).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from purlin_bench.base.errors import DeadlockError
from purlin_bench.program.model import Consume, FlagRef, Notify, Program, Step, StepId


class Walk:
    """Flag state of one call, with epoch counters: a flag's word counts the
    notifies it ever had, and a wait in call ``epoch`` (1-based) needs
    ``epoch`` of them, so the same flags serve every call with no reset."""

    def __init__(self, program: Program, flags: dict[FlagRef, int] | None = None, epoch: int = 1):
        self.program = program
        self.flags = flags if flags is not None else {}
        self.epoch = epoch
        self.heads = {(r, c): 0 for r, chans in enumerate(program.lists) for c in range(len(chans))}

    def _ready(self, step: Step) -> bool:
        if isinstance(step, Consume):
            return all(self.flags.get(f, 0) >= self.epoch for f in step.waits)
        return True

    def runnable(self) -> list[tuple[StepId, Step]]:
        found = []
        for (rank, channel), index in self.heads.items():
            steps = self.program.lists[rank][channel]
            if index < len(steps) and self._ready(steps[index]):
                found.append((StepId(rank, channel, index), steps[index]))
        return found

    def finish(self, sid: StepId, step: Step) -> None:
        if isinstance(step, Notify):
            self.flags[step.flag] = self.flags.get(step.flag, 0) + 1
        self.heads[(sid.rank, sid.channel)] = sid.index + 1

    def done(self) -> bool:
        return all(i >= len(self.program.lists[r][c]) for (r, c), i in self.heads.items())

    def blocked(self) -> str:
        parts = []
        for (rank, channel), index in sorted(self.heads.items()):
            steps = self.program.lists[rank][channel]
            if index < len(steps):
                step = steps[index]
                missing = [f.text() for f in getattr(step, "waits", ()) if self.flags.get(f, 0) < self.epoch]
                parts.append(f"rank {rank} channel {channel} step {index} waits on {', '.join(missing) or '?'}")
        return "; ".join(parts)

    def order(self, rng: np.random.Generator | None = None) -> Iterator[tuple[StepId, Step]]:
        """Yield steps in an order this walk allows; raise DeadlockError if stuck.

        With ``rng`` one runnable step is picked at random each time; without it,
        every runnable step is taken in rank/channel order, round by round."""
        while not self.done():
            ready = self.runnable()
            if not ready:
                raise DeadlockError(f"deadlock in {self.program.collective}/{self.program.strategy}: {self.blocked()}")
            if rng is not None:
                ready = [ready[int(rng.integers(len(ready)))]]
            for sid, step in ready:
                yield sid, step
                self.finish(sid, step)


def flag_hops(program: Program) -> int:
    """The flag hops on the program's critical path: a wait ends one hop after
    the last notify it waits for (from another list), so where ranks are
    processes a call costs about that many cross-rank round trips. Walked in
    the validator's order, which finishes every notify before a wait on it."""
    hops: dict[tuple[int, int], int] = {}
    bumped: dict[FlagRef, int] = {}
    for sid, step in Walk(program).order():
        here = hops.get((sid.rank, sid.channel), 0)
        if isinstance(step, Consume) and step.waits:
            here = max(here, *(bumped[f] + 1 for f in step.waits))
        elif isinstance(step, Notify):
            bumped[step.flag] = max(bumped.get(step.flag, 0), here)
        hops[(sid.rank, sid.channel)] = here
    return max(hops.values(), default=0)
