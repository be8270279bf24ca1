"""Whether the other ranks of a run are still alive: a pulse, not a clock.

A rank that is stopped (SIGSTOP, a debugger) or frozen neither exits, so the
launcher sees nothing, nor answers, so its peers would wait out whatever
bound the command has, and a command may legitimately run for minutes (a
compile, a long timing). So a wait on a peer bounds the peer's *silence*,
not the total time: every rank bumps a beat key in the store from a thread
of its own, and a peer whose beat has not moved for the silence bound (the
user's watchdog, PURLIN_WATCHDOG_S) is named as not answering. A rank busy
in a long command still beats; a stopped one does not. A peer that never
beat (stopped before it joined) is given a start-up allowance more.

The beat thread needs the GIL: a C call that holds it for longer than the
bound would read as silence. numpy's copies and reductions, NVRTC and nvcc
release it.
"""

from __future__ import annotations

import threading
import time

from purlin_bench.procs.errors import DistError, PeerTimeout

# A watchdog of milliseconds bounds a flag wait, where a peer answers in
# microseconds; a process's pulse is a thread the scheduler must get to, so
# silence is judged over at least this long (several beats on a busy machine).
FLOOR_S = 2.0
# Beats per silence bound: one late beat (a busy core) is never silence.
BEATS = 8
# Ranks start together but import at different speeds on a busy machine: a
# peer that has not joined yet is given this much more than the bound.
STARTUP_S = 30.0


def silence_bound(watchdog_s: float) -> float:
    """How long a peer may be silent before a wait on it fails."""
    return max(float(watchdog_s), FLOOR_S)


def beat_key(run: str, rank: int) -> str:
    return f"{run}/beat/{rank}"


class Heartbeat:
    """Bumps ``rank``'s beat key every ``period_s`` from a daemon thread, on
    a store connection of its own (``store``, closed with it): a beat never
    queues behind the main thread's long waits on the shared connection."""

    def __init__(self, store, run: str, rank: int, period_s: float):
        self._store, self._key, self._period = store, beat_key(run, rank), period_s
        self._stop = threading.Event()
        self._count = 0
        self._beat()  # at once: a peer that joined has beaten, so only a join itself is unjudged
        self._thread = threading.Thread(target=self._loop, name="purlin-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self._count += 1
        self._store.set(self._key, str(self._count).encode())

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._beat()
            except DistError:
                return  # the store went away: the run is ending, and the main thread's waits say why

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._period + 1.0)
        self._store.close()


class Pulse:
    """The peers' beats as this rank has seen them: a peer is silent once its
    beat has not changed for ``silence_s`` of this rank's looking, and one
    that never beat (stopped before it joined) after ``STARTUP_S`` more."""

    def __init__(self, store, run: str, silence_s: float):
        self._store, self._run, self.silence_s = store, run, float(silence_s)
        self._seen: dict[int, tuple[bytes | None, float]] = {}

    def silent_for(self, rank: int) -> tuple[float, bool]:
        """Seconds since ``rank``'s beat last moved as seen from here, and
        whether it has beaten at all."""
        beat = self._store.try_get(beat_key(self._run, rank))
        now = time.monotonic()
        seen = self._seen.get(rank)
        if seen is None or seen[0] != beat:
            self._seen[rank] = (beat, now)
            return 0.0, beat is not None
        return now - seen[1], beat is not None

    def check(self, rank: int, what: str) -> None:
        """Raise PeerTimeout naming ``rank`` and ``what`` waited for, if
        ``rank`` has been silent for the bound."""
        silent, joined = self.silent_for(rank)
        if joined and silent >= self.silence_s:
            raise PeerTimeout(
                f"{what}: rank {rank} has shown no sign of life for {silent:.1f} s "
                f"(stopped or frozen? PURLIN_WATCHDOG_S bounds a peer's silence, here {self.silence_s:g} s)"
            )
        if not joined and silent >= self.silence_s + STARTUP_S:
            raise PeerTimeout(
                f"{what}: rank {rank} has not joined the run in {silent:.0f} s (stopped or frozen while starting?)"
            )


__all__ = ["FLOOR_S", "STARTUP_S", "Heartbeat", "Pulse", "beat_key", "silence_bound"]
