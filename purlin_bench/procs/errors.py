"""The errors of the dist layer: each says in one line which process, store or
step is at fault, so a multi-process failure reads as a cause, not a hang."""

from __future__ import annotations

from purlin_bench.base import errors
from purlin_bench.base.errors import ExecutionError, ProgramError, PurlinError


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


# How an error crosses from one rank to another in a pickled answer: by its
# class's name, so that every answer pickles, and only the classes rank 0
# must tell apart keep theirs. A refusal of the program (a ProgramError, such as
# the compiled kernel's build bound) is n/a to a check, as on one process; a
# cancellation says a rank only stopped because another failed.
FAILED, REFUSED, CANCELLED = 0, 1, 2  # the order in which rank 0 says them


def error_kind(exc: PurlinError) -> str | None:
    """What an answer carries of ``exc``'s class (None: a plain failure)."""
    return type(exc).__name__ if isinstance(exc, (ProgramError, Cancelled, errors.CallAborted)) else None


def kind_order(kind: str | None) -> int:
    # A call aborted because another wait timed out is a consequence, as a
    # cancellation is: the rank whose wait timed out names the flag.
    return FAILED if kind is None else CANCELLED if kind in ("Cancelled", "CallAborted") else REFUSED


def error_of(kind: str | None, message: str) -> PurlinError:
    """The error to raise for an answer of ``kind``: a refusal of a class
    this process does not know is a ProgramError still."""
    if kind is None:
        return ExecutionError(message)
    if kind == "Cancelled":
        return Cancelled(message)
    if kind == "CallAborted":
        return errors.CallAborted(message)
    cls = getattr(errors, kind, ProgramError)
    return cls(message) if isinstance(cls, type) and issubclass(cls, ProgramError) else ProgramError(message)
