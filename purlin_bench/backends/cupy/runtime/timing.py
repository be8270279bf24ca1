"""Time device work the way the field does: CUDA events around batches of
calls, each batch one CUDA graph replay (or eager launches), median of batches.

Several candidates timed together take their batches in turn (A B, B A,
A B, ...): on a shared GPU the clocks and the neighbours' load drift over
seconds, and timing one candidate after the other puts that drift into their
ratio (the same configuration measured twice in one process differed by up
to 3.4%). Each timed batch follows one untimed call of its own candidate.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from purlin_bench.backends.port import take_turns
from purlin_bench.base.timing import Timing


@dataclass(frozen=True)
class StreamCandidate:
    """The GPU's timing candidate (the port's opaque Candidate, made
    concrete): ``enqueue(stream, i)`` puts call ``i`` on ``stream``; ``after``
    runs once the candidate's warm-up and its last batch are done (status checks)."""

    enqueue: Callable[[object, int], None]
    stream: object
    after: Callable[[], None] | None = None




def time_side_by_side(
    candidates: Sequence[StreamCandidate],
    device: int,
    iters: int,
    warmup: int,
    reps: int,
    graph: bool,
    between: Callable[[], None] | None = None,
) -> list[Timing]:
    """Microseconds per call of each candidate: the median over ``reps``
    batches of ``iters`` calls, the candidates' batches interleaved."""
    if iters < 1 or reps < 1:
        raise ValueError("iters and reps must be at least 1")
    import cupy

    with cupy.cuda.Device(device):
        replays = [_replay(c, iters, graph) for c in candidates]
        for c, replay in zip(candidates, replays):
            for _ in range(max(0, warmup)):
                replay()
            c.stream.synchronize()
            if c.after:
                c.after()
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()

        def batch_of(c: StreamCandidate, replay: Callable[[], None]) -> Callable[[], float]:
            def batch() -> float:
                # One untimed call first: the batch before may be another
                # candidate's, and the first call after it pays for what that
                # one left in the caches (unprimed, the candidate timed after
                # CuPy's baseline looked up to 11% slower than the same
                # configuration timed after itself).
                c.enqueue(c.stream, 0)
                begin.record(c.stream)
                replay()
                end.record(c.stream)
                end.synchronize()
                return cupy.cuda.get_elapsed_time(begin, end) * 1e3 / iters

            return batch

        samples = take_turns([batch_of(c, r) for c, r in zip(candidates, replays)], reps, between)
        cupy.cuda.Device(device).synchronize()
    for c in candidates:
        if c.after:
            c.after()
    return [Timing(statistics.median(s), tuple(s)) for s in samples]


def time_calls(
    enqueue: Callable[[object, int], None],
    stream,
    device: int,
    iters: int,
    warmup: int,
    reps: int,
    graph: bool,
    after: Callable[[], None] | None = None,
) -> Timing:
    """One candidate: ``enqueue(stream, i)`` puts call ``i`` on ``stream``."""
    return time_side_by_side([StreamCandidate(enqueue, stream, after)], device, iters, warmup, reps, graph)[0]


def _replay(c: StreamCandidate, iters: int, graph: bool) -> Callable[[], None]:
    def batch() -> None:
        for i in range(iters):
            c.enqueue(c.stream, i)

    if not graph:
        return batch
    c.stream.begin_capture()
    try:
        batch()
    finally:
        captured = c.stream.end_capture()
    return lambda: captured.launch(c.stream)
