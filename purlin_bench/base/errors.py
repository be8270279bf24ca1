"""Errors a user can cause and fix. The CLI prints them as one line and exits
non-zero; anything else escaping is a bug and keeps its traceback."""

from __future__ import annotations


class PurlinError(Exception):
    """Base class of every error that is the user's input, not our bug."""


class SpecError(PurlinError):
    """A collective spec is malformed or semantically invalid."""


class ProgramError(PurlinError):
    """A strategy cannot derive a program, or a program fails validation."""


class CapacityError(ProgramError):
    """A valid program past what one datapath takes (the compiled kernel's
    build bound): another datapath runs it, so a check of that datapath reports
    the combination as not applicable, not as a failure."""


class ExecutionError(PurlinError):
    """An executor could not run a program (deadlock, timeout, no device)."""


class DeadlockError(ExecutionError):
    """No step can make progress; the message names the blocked steps."""


class WatchdogTimeout(ExecutionError):
    """A device wait ran past its bound; the message names rank, step and flag."""


class CallAborted(WatchdogTimeout):
    """This rank's call left because another wait (another rank's, maybe)
    timed out: a consequence. Said after the timeout that caused it, which
    names rank, step and flag."""


class CountsError(PurlinError):
    """Per-call counts of a variable-length collective that do not fit what
    they are given to (the spec's chunks, the program's capacity, the buffers)."""
