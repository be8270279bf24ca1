"""two-shot: for reductions. Each flow is split into one part per rank taking
part; the part's owner pulls it from every source, reduces it, and writes the
result straight into every consumer's output (reduce-scatter and all-gather
fused into one pass: each input element read once, each output written once)."""

from __future__ import annotations

from purlin_bench.program.model import Consume
from purlin_bench.spec.instance import Instance
from purlin_bench.strategies.base import Builder, Strategy, in_ref, out_ref, slices, split_even


def refuse(inst: Instance) -> str | None:
    if inst.op != "reduce":
        return f"two-shot applies to reductions; {inst.spec.name} is a copy"
    return None


def emit(b: Builder, params: dict[str, int]) -> None:
    turn = [0] * b.inst.ranks
    for flow in b.inst.flows:
        owners = sorted({p.rank for p in flow.sources} | {p.rank for p in flow.consumers})
        for owner, (base, length) in zip(owners, split_even(flow.count, len(owners), b.unit)):
            size = b.slice_elems(params["slice_bytes"], length, b.channels)
            for lo, n in slices(length, size, b.unit):
                srcs = tuple(in_ref(s, base + lo, n) for s in flow.sources)
                dsts = tuple(out_ref(p, base + lo, n) for p in flow.consumers)
                op = "reduce" if len(srcs) > 1 else "copy"
                b.add(owner, turn[owner], Consume((), op, srcs, dsts))
                turn[owner] += 1


STRATEGY = Strategy("two-shot", "reduce one part per rank, then write it to every consumer (fused)", emit, refuse)
