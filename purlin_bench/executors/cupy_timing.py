"""Time device work the way the field does: CUDA events around batches of
calls, each batch one CUDA graph replay (or eager launches), median of batches."""

from __future__ import annotations

import statistics
from typing import Callable

from purlin_bench.timing import Timing


def time_calls(enqueue: Callable[[object, int], None], stream, device: int, iters: int, warmup: int, reps: int, graph: bool, after: Callable[[], None] | None = None) -> Timing:
    """``enqueue(stream, i)`` puts call ``i`` on ``stream``. Returns microseconds
    per call: the median over ``reps`` batches of ``iters`` calls."""
    import cupy

    if iters < 1 or reps < 1:
        raise ValueError("iters and reps must be at least 1")

    def batch() -> None:
        for i in range(iters):
            enqueue(stream, i)

    with cupy.cuda.Device(device):
        if graph:
            stream.begin_capture()
            try:
                batch()
            finally:
                captured = stream.end_capture()
            replay = lambda: captured.launch(stream)  # noqa: E731
        else:
            replay = batch
        for _ in range(max(0, warmup)):
            replay()
        stream.synchronize()
        if after:
            after()
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        samples = []
        for _ in range(reps):
            begin.record(stream)
            replay()
            end.record(stream)
            end.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(begin, end) * 1e3 / iters)
        cupy.cuda.Device(device).synchronize()
    if after:
        after()
    return Timing(statistics.median(samples), tuple(samples))
