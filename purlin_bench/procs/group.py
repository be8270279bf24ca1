"""Collectives of small Python objects between the ranks of one run, over a
:class:`~purlin_bench.procs.store.Store`.

Every call takes a fresh sequence number on every rank, so the same program
order on every rank lines the keys up without any rank negotiating them; a
rank that calls a different step at the same point is caught (its position
is published under ``{run}/at/{rank}``) instead of waiting out the timeout.
Every wait is bounded, polls in short slices so that an abort from any rank
or the launcher stops it, and fails with a message naming this rank, the
step and the ranks that did not come.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterable
from typing import Any

from purlin_bench.procs.errors import Cancelled, DistError, PeerFailed, PeerTimeout, StoreTimeout, StoreUnreachable
from purlin_bench.procs.liveness import BEATS, Heartbeat, Pulse
from purlin_bench.procs.store import Store

# Short enough that an abort stops a wait promptly, long enough that an idle
# wait costs the store a few requests a second, not a spin.
SLICE_S = 0.2


def abort_key(run: str) -> str:
    """The key whose presence aborts every wait of ``run`` (the launcher sets it too)."""
    return f"{run}/abort"


class Group:
    """The ranks ``0..size-1`` of run ``run``, this process being ``rank``.

    One Group per rank per run: the sequence numbers that line the keys up
    start at 1 in each Group, so a second one in the same run would collide
    with the first. The group closes its store when it closes.

    With ``silence_s``, the rank beats (procs/liveness.py) and a wait on a
    peer also fails once that peer has shown no sign of life for
    ``silence_s``: ``timeout_s`` is then only a backstop for a peer that is
    alive but never comes, so long legitimate steps are not cut short."""

    def __init__(self, store: Store, rank: int, size: int, run: str, timeout_s: float = 60.0,
                 silence_s: float | None = None):
        if not isinstance(size, int) or size < 1:
            raise DistError(f"a group needs a size of at least 1, not {size!r}")
        if not isinstance(rank, int) or not 0 <= rank < size:
            raise DistError(f"rank {rank!r} is not in 0..{size - 1}")
        if not isinstance(run, str) or not run:
            raise DistError("a group needs a non-empty run id")
        self.store = store
        self.rank = rank
        self.size = size
        self.run = run
        self.timeout_s = float(timeout_s)
        self._seq = 0
        self._step = ""
        self._scope = ""
        self._cancel: str | None = None
        self._owned: list[Any] = []
        self._closed = False
        self._pulse = Pulse(store, run, silence_s) if silence_s else None
        self._heart = Heartbeat(store.another(), run, rank, silence_s / BEATS) if silence_s else None

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- collectives ---------------------------------------------------------

    def barrier(self, step: str, timeout_s: float | None = None) -> None:
        """Return once every rank has reached ``step``."""
        prefix = self._begin(step)
        self.store.set(f"{prefix}/{self.rank}", b"")
        self._collect(prefix, range(self.size), timeout_s)
        self._finish(prefix, range(self.size))

    def broadcast(self, obj: Any, step: str, root: int = 0, timeout_s: float | None = None) -> Any:
        """``root``'s ``obj`` on every rank (a copy on the others)."""
        self._check_root(root)
        prefix = self._begin(step)
        if self.rank == root:
            self.store.set(f"{prefix}/{root}", _dumps(obj))
            out = obj
        else:
            out = pickle.loads(self._collect(prefix, [root], timeout_s)[root])
        self._finish(prefix, [root])
        return out

    def allgather(self, obj: Any, step: str, timeout_s: float | None = None) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        prefix = self._begin(step)
        self.store.set(f"{prefix}/{self.rank}", _dumps(obj))
        got = self._collect(prefix, range(self.size), timeout_s)
        self._finish(prefix, range(self.size))
        return [obj if r == self.rank else pickle.loads(got[r]) for r in range(self.size)]

    def gather(self, obj: Any, step: str, root: int = 0, timeout_s: float | None = None) -> list[Any] | None:
        """Every rank's ``obj``, in rank order, on ``root``; None elsewhere."""
        self._check_root(root)
        prefix = self._begin(step)
        others = [r for r in range(self.size) if r != root]
        out = None
        if self.rank == root:
            got = self._collect(prefix, others, timeout_s)
            out = [obj if r == root else pickle.loads(got[r]) for r in range(self.size)]
        else:
            self.store.set(f"{prefix}/{self.rank}", _dumps(obj))
        self._finish(prefix, others)
        return out

    def scope(self, name: str, cancel: str | None = None) -> None:
        """Number the next calls from 1 within ``name`` (e.g. one command of
        a run), so a rank that failed part-way through the last scope cannot
        shift the keys of this one; a wait of this scope raises PeerFailed
        once key ``cancel`` is set (a rank failed this scope's work)."""
        self._scope, self._seq, self._cancel = name, 0, cancel

    def cancel(self, message: str) -> None:
        """Stop every rank's waits in the current scope (see :meth:`scope`)."""
        if self._cancel is not None:
            self.store.set(self._cancel, message.encode("utf-8", "replace"))

    def cancelled(self) -> str | None:
        """Why the run or the current scope was stopped, if it was."""
        for key in (abort_key(self.run), self._cancel):
            if key is not None and (why := self.store.try_get(key)) is not None:
                return why.decode("utf-8", "replace")
        return None

    def check_cancelled(self, what: str) -> None:
        """Raise PeerFailed if the run was aborted (a rank died), Cancelled
        if a rank failed the current scope's work; ``what`` says where."""
        why = self.store.try_get(abort_key(self.run))
        if why is not None:
            raise PeerFailed(f"{what}: {why.decode('utf-8', 'replace')}")
        why = self.store.try_get(self._cancel) if self._cancel else None
        if why is not None:
            raise Cancelled(f"{what}: {why.decode('utf-8', 'replace')}")

    def check_alive(self, rank: int, what: str) -> None:
        """Raise PeerTimeout if ``rank`` has been silent for the group's
        silence bound (none: never); ``what`` says what waited on it."""
        if self._pulse is not None:
            self._pulse.check(rank, what)

    def abort(self, message: str) -> None:
        """Make every rank's current or next wait raise :class:`PeerFailed`."""
        try:
            self.store.set(abort_key(self.run), message.encode("utf-8", "replace"))
        except StoreUnreachable:
            pass  # the run is ending anyway; the launcher reports what it sees

    def close(self) -> None:
        """Leave the group. A rank that owns the store (rank 0 under
        torchrun) first waits, bounded, for the others to leave, so that none
        of them loses the store in the middle of its last step."""
        if self._closed:
            return
        self._closed = True
        if self._heart is not None:
            self._heart.stop()
        try:
            key = f"{self.run}/closed"
            left = self.store.add(key)
            deadline = time.monotonic() + self.timeout_s
            while self._owned and left < self.size and time.monotonic() < deadline:
                if self.store.try_get(abort_key(self.run)) is not None:
                    break
                time.sleep(0.05)
                left = int(self.store.try_get(key) or b"0")
        except DistError:
            pass  # leaving cannot fail in a way the caller could act on
        finally:
            self.store.close()
            for thing in self._owned:
                thing.close()

    def own(self, thing: Any) -> None:
        """Close ``thing`` (e.g. the store's server) when the group closes."""
        self._owned.append(thing)

    # -- internals -----------------------------------------------------------

    def _check_root(self, root: int) -> None:
        if not isinstance(root, int) or not 0 <= root < self.size:
            raise DistError(f"root {root!r} is not in 0..{self.size - 1}")

    def _begin(self, step: str) -> str:
        if not isinstance(step, str) or not step:
            raise DistError(f"a step must be a non-empty string, not {step!r}")
        if self._closed:
            raise DistError(f"rank {self.rank}: step {step!r} on a closed group")
        self._seq += 1
        self._step = step
        self.store.set(f"{self.run}/at/{self.rank}", f"{self._scope}:{self._seq} {step}".encode())
        return f"{self.run}/{self._scope}:{self._seq}/{step}"

    def _finish(self, prefix: str, written: Iterable[int]) -> None:
        # Every rank counts itself done once it has read all it needs; the
        # last one deletes the call's keys, so the store stays O(size).
        if self.store.add(f"{prefix}/done") == self.size:
            for r in written:
                self.store.delete(f"{prefix}/{r}")
            self.store.delete(f"{prefix}/done")

    def _where(self, rank: int) -> tuple[int, str] | None:
        raw = self.store.try_get(f"{self.run}/at/{rank}")
        if raw is None:
            return None
        at, _, step = raw.decode("utf-8", "replace").partition(" ")
        scope, _, seq = at.rpartition(":")
        if scope != self._scope:
            return None  # in another scope: its calls are not this one's to compare
        return int(seq), step

    def _collect(self, prefix: str, ranks: Iterable[int], timeout_s: float | None) -> dict[int, bytes]:
        """The values the other ``ranks`` wrote under ``prefix``, or a named failure."""
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + timeout
        pending = [r for r in ranks if r != self.rank]
        got: dict[int, bytes] = {}
        fresh = True
        while pending:
            for r in list(pending):
                # Where the peer is must be read before its key: a peer past
                # this call whose key is still missing then surely skipped it.
                where = None if fresh else self._where(r)
                value = self.store.try_get(f"{prefix}/{r}")
                if value is not None:
                    got[r] = value
                    pending.remove(r)
                elif where is not None and (where[0] > self._seq or (where[0] == self._seq and where[1] != self._step)):
                    raise DistError(
                        f"rank {self.rank}: the ranks' programs diverged at call {self._seq}: this rank is at step "
                        f"{self._step!r}, rank {r} at step {where[1]!r} (call {where[0]})"
                    )
            if not pending:
                break
            fresh = False
            self.check_cancelled(f"rank {self.rank} stopped waiting at step {self._step!r}")
            self._check_pulses(prefix, pending, got)
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerTimeout(self._timeout_message(timeout, pending))
            try:
                got[pending[0]] = self.store.get(f"{prefix}/{pending[0]}", min(SLICE_S, left))
                pending.pop(0)
            except StoreTimeout:
                pass
        return got

    def _check_pulses(self, prefix: str, pending: list[int], got: dict[int, bytes]) -> None:
        for r in list(pending) if self._pulse is not None else ():
            try:
                self.check_alive(r, f"rank {self.rank} waited at step {self._step!r} (call {self._seq}) for rank {r}")
            except PeerTimeout:
                # Its beat may have lagged its main thread: a value it wrote meanwhile still counts.
                value = self.store.try_get(f"{prefix}/{r}")
                if value is None:
                    raise
                got[r] = value
                pending.remove(r)

    def _timeout_message(self, timeout: float, missing: list[int]) -> str:
        notes = []
        for r in missing:
            where = self._where(r)
            notes.append((r, None if where is None else f"last seen at step {where[1]!r}, call {where[0]}"))
        ranks = ", ".join(str(r) for r, _ in notes)
        if all(note is None for _, note in notes):
            why = "never arrived"
        else:
            why = "; ".join(f"{r} {note or 'never arrived'}" for r, note in notes) + f"; this is call {self._seq}"
        return f"rank {self.rank}: waited {timeout:g} s at step {self._step!r} for rank(s) {ranks} ({why})"


def _dumps(obj: Any) -> bytes:
    # pickle is safe here only because every peer on the store proved it
    # holds the run's token: the objects come from our own ranks, nobody else.
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


__all__ = ["Group", "abort_key", "SLICE_S"]
