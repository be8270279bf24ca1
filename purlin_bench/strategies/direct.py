"""direct: one-shot pull. Every consumer reads each source slice where it lies
(remotely) and copies or reduces it into its own output. No data flags: the
sources are inputs, ready once their rank is in the call."""

from __future__ import annotations

from collections import Counter

from purlin_bench.program.model import Consume
from purlin_bench.strategies.base import Builder, Strategy, data_op, in_ref, out_ref, slices


def emit(b: Builder, params: dict[str, int]) -> None:
    turn = [0] * b.inst.ranks  # round-robin slices over each rank's channels
    pulled = Counter(rank for flow in b.inst.flows for rank in flow.consumer_ranks())
    for flow in b.inst.flows:
        by_rank: dict[int, list] = {}
        for place in flow.consumers:
            by_rank.setdefault(place.rank, []).append(place)
        for rank, places in by_rank.items():
            size = b.slice_elems(params["slice_bytes"], flow.count, b.pieces_per_flow(pulled[rank]))
            for lo, n in slices(flow.count, size, b.unit):
                srcs = tuple(in_ref(s, lo, n) for s in flow.sources)
                dsts = tuple(out_ref(p, lo, n) for p in places)
                b.add(rank, turn[rank], Consume((), data_op(flow), srcs, dsts))
                turn[rank] += 1


STRATEGY = Strategy("direct", "one-shot pull: consumers read every source remotely and reduce/copy", emit)
