"""push: one-shot push. Every source writes its slice into each consumer:
straight into the output for a copy (read once, written to every consumer),
into the consumer's scratch for a reduction, which the consumer then reduces
locally once the producers' data notifies arrive."""

from __future__ import annotations

from purlin_bench.program.model import Consume, Notify, Stage
from purlin_bench.strategies.base import Builder, Strategy, data_op, in_ref, out_ref, slices


def emit(b: Builder, params: dict[str, int]) -> None:
    turn = [0] * b.inst.ranks
    sent = b.inst.flows_sent()
    # A rank's consumes come after all its stages: a consume waits on its
    # peers, and one placed between a rank's stages held back the stages
    # after it, which other ranks' consumes wait on. In flow order that made
    # a chain (reduce-scatter: rank k's consume waited on rank k-1's, a flag
    # hop each, 8 hops at 8 ranks); stages first, every consume is one hop.
    consumes: list[tuple[int, int, Consume]] = []
    for flow in b.inst.flows:
        size = b.slice_elems(params["slice_bytes"], flow.count, b.pieces_per_flow(sent[flow.sources[0].rank]))
        consumers: dict[int, list] = {}
        for place in flow.consumers:
            consumers.setdefault(place.rank, []).append(place)
        for lo, n in slices(flow.count, size, b.unit):
            channel = turn[flow.sources[0].rank]
            if data_op(flow) == "copy":
                (src,) = flow.sources
                dsts = tuple(out_ref(p, lo, n) for p in flow.consumers)
                b.add(src.rank, channel, Stage(in_ref(src, lo, n), dsts))
            else:
                # (All stages before any consume also means an in-place
                # consume never overwrites an input still to be sent.)
                for rank, places in consumers.items():
                    local, staged, flags = [], [], []
                    for src in flow.sources:
                        if src.rank == rank:
                            local.append(in_ref(src, lo, n))
                            continue
                        slot = b.scratch(rank, n, like=in_ref(src, lo, n))
                        flag = b.flag(rank)
                        b.add(src.rank, channel, Stage(in_ref(src, lo, n), (slot,)), Notify(flag))
                        staged.append(slot)
                        flags.append(flag)
                    dsts = tuple(out_ref(p, lo, n) for p in places)
                    srcs = tuple(local + staged)
                    op = "reduce" if len(srcs) > 1 else "copy"
                    consumes.append((rank, channel, Consume(tuple(flags), op, srcs, dsts)))
            for src in flow.sources:
                turn[src.rank] += 1
    for rank, channel, step in consumes:
        b.add(rank, channel, step)


STRATEGY = Strategy("push", "one-shot push: producers write into consumers (scratch for reductions)", emit)
