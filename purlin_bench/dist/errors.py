"""The errors of the dist layer: each says in one line which process, store or
step is at fault, so a multi-process failure reads as a cause, not a hang."""

from __future__ import annotations

from purlin_bench.errors import ExecutionError


class DistError(ExecutionError):
    """Processes of one run could not find each other or agree on a step."""


class StoreRefused(DistError):
    """The run's store did not accept this process's proof of the token."""


class StoreUnreachable(DistError):
    """The run's store cannot be reached, or went away mid-request."""


class StoreTimeout(DistError):
    """A key did not appear in the store within the wait's bound."""


class PeerTimeout(DistError):
    """Another rank did not reach a step in time; names the rank and step."""


class PeerFailed(DistError):
    """Another rank (or the launcher) aborted the run; carries its message."""


__all__ = ["DistError", "PeerFailed", "PeerTimeout", "StoreRefused", "StoreTimeout", "StoreUnreachable"]


class Cancelled(ExecutionError):
    """Another rank failed the work of this step (Group.scope/cancel): this
    rank stopped waiting for it. Not a lost rank: the run goes on."""
