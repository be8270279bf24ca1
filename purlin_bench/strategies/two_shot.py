"""two-shot: each flow is split into one part per rank taking part; the
part's owner pulls it from every source, reduces it (or, for a copy, just
reads it), and writes the result straight into every consumer's output.

For a reduction this is reduce-scatter and all-gather fused into one pass; for
a copy with one source and many consumers (broadcast) it is scatter and
all-gather fused: the source is read once in all, each output written once,
and every rank's thread blocks share the work instead of only the source's
(``push``) or every consumer re-reading the whole source (``direct``)."""

from __future__ import annotations

from purlin_bench.program.model import Consume
from purlin_bench.strategies.base import Builder, Strategy, data_op, in_ref, out_ref, slices, split_even


def emit(b: Builder, params: dict[str, int]) -> None:
    turn = [0] * b.inst.ranks
    for i, flow in enumerate(b.inst.flows):
        owners = sorted({p.rank for p in flow.sources} | {p.rank for p in flow.consumers})
        if b.inst.variable:
            # A call fills each flow's capacity from its first part on, so the
            # same owner taking every flow's first part did most of the work
            # (reduce-scatter-v, skewed counts). Flow i's parts start at
            # owner i instead: each owner takes early and late parts alike.
            owners = owners[i % len(owners):] + owners[: i % len(owners)]
        for owner, (base, length) in zip(owners, split_even(flow.count, len(owners), b.unit)):
            size = b.slice_elems(params["slice_bytes"], length, b.channels)
            for lo, n in slices(length, size, b.unit):
                srcs = tuple(in_ref(s, base + lo, n) for s in flow.sources)
                dsts = tuple(out_ref(p, base + lo, n) for p in flow.consumers)
                b.add(owner, turn[owner], Consume((), data_op(flow), srcs, dsts))
                turn[owner] += 1


STRATEGY = Strategy(
    "two-shot",
    "split each flow over the ranks taking part; each owner reduces/copies its part into every consumer",
    emit,
)
