"""Rank 0's numbered commands and the workers' answers, over the run's store.

Rank 0 writes ``cmd/N``; rank k answers ``ans/N/k``. Every wait here is
bounded three ways: the run's abort (the launcher saw a rank die) stops it
within a slice; a peer that shows no sign of life for the user's bound
(Group.check_alive, procs/liveness.py) ends it naming that peer; and a limit
on the total time is the backstop for a peer that is alive but never
answers. A long command on a live peer (a compile, a long timing) is not cut
short by anything but that backstop.
"""

from __future__ import annotations

import pickle
from typing import Any

from purlin_bench.procs.errors import DistError, PeerFailed, PeerTimeout, StoreTimeout, error_of, kind_order
from purlin_bench.procs.group import Group, abort_key

# The number of rank 0's last command (rank 0 numbers them; a worker counts its own).
sequence = [0]
# A wait polls in slices this long, so that a run stopped by its launcher (a
# rank died: it sets the run's abort key) is noticed within a slice.
SLICE_S = 0.25


def send(group: Group, command: tuple) -> None:
    """Number ``command`` and give it to every worker (rank 0)."""
    # Pickled before it is numbered: a command that cannot be sent must not
    # leave rank 0's numbers ahead of the workers' (they would wait on a gap).
    raw = pickle.dumps(command)
    sequence[0] += 1
    group.store.set(f"cmd/{sequence[0]}", raw)
    scope(group, sequence[0])


def scope(group: Group, n: int) -> None:
    """Command ``n``'s group calls are numbered on their own, and a rank that
    fails it stops every other rank's waits in it (Group.scope): a failure in
    one command never strands a peer in a barrier, nor shifts the next one."""
    group.scope(f"c{n}", cancel=f"{group.run}/fail/{n}")


def answers(group: Group, what: str, limit_s: float) -> list[Any]:
    """Every worker's answer to the last command, in rank order; an error
    answer is raised as that rank's error."""
    out: list[Any] = [None]
    n = sequence[0]
    for rank in range(1, group.size):
        key = f"ans/{n}/{rank}"
        said = wait(group, key, limit_s, rank, f"rank 0 waited for rank {rank}'s answer to '{what}'")
        out.append(pickle.loads(said))
        group.store.delete(key)
    # Every worker has read the command (it answered): it can go.
    group.store.delete(f"cmd/{n}")
    group.store.delete(f"{group.run}/fail/{n}")
    # A failure is said before a refusal of the program, both before a cancellation.
    errors = sorted(
        ((kind_order(a[2]), r, a[1], a[2]) for r, a in enumerate(out) if r and a[0] == "error"), key=lambda e: e[:2]
    )
    if errors:
        _, rank, message, kind = errors[0]
        raise error_of(kind, f"rank {rank}: {message}")
    return [a[1] if a else None for a in out]


def wait(group: Group, key: str, limit_s: float, peer: int, what: str) -> bytes:
    """The value of ``key`` once ``peer`` writes it; PeerFailed when the run
    is aborted, PeerTimeout when ``peer`` falls silent, DistError when
    ``limit_s`` passes first."""
    store, waited = group.store, 0.0
    while True:
        try:
            return store.get(key, SLICE_S)
        except StoreTimeout:
            waited += SLICE_S
        why = store.try_get(abort_key(group.run))
        if why is not None:
            raise PeerFailed(f"{what}: {why.decode(errors='replace')}")
        try:
            group.check_alive(peer, what)
        except PeerTimeout:
            # Its beat may have lagged its main thread: an answer written meanwhile still counts.
            value = store.try_get(key)
            if value is None:
                raise
            return value
        if waited >= limit_s:
            raise DistError(f"{what} for {limit_s:.0f} s and got none: rank {peer} is alive but stuck")


__all__ = ["SLICE_S", "answers", "scope", "send", "sequence", "wait"]
