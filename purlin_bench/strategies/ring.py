"""ring: slices travel neighbour to neighbour (rank r sends only to r+1).

A reduced flow is cut into one part per rank; part p starts at rank p+1 and
goes once around the ring, each rank adding its input on the way (fused with
the send), so that it ends fully reduced at rank p, its owner. From there it
travels on around the ring to every consumer (the owner's last reduction is
fused with the first send). A copied flow starts at its source and goes on to
the farthest consumer. Parts are cut into slices, so the hops pipeline.

Each rank's list is ordered by hop (then slice), and every flag edge goes from
hop h to hop h+1: the program is deadlock-free by construction."""

from __future__ import annotations

from purlin_bench.program.model import Consume, Notify, Ref, Stage, Step
from purlin_bench.spec.instance import Flow
from purlin_bench.strategies.base import Builder, Strategy, in_ref, out_ref, slices, split_even

# Default pipelining: a few slices per channel, but none under 256 KiB,
# where a hop's fixed cost would outweigh what pipelining overlaps.
_MIN_AUTO_SLICE_BYTES = 256 * 1024
_AUTO_SLICES_PER_CHANNEL = 4


class _Ring:
    def __init__(self, b: Builder):
        self.b = b
        self.R = b.inst.ranks
        self.blocks: list[tuple[tuple, int, int, list[Step]]] = []  # (order key, rank, channel, steps)

    def put(self, key: tuple, rank: int, channel: int, *steps: Step) -> None:
        self.blocks.append((key, rank, channel, list(steps)))

    def landing(self, places_at: dict[int, list], rank: int, lo: int, n: int, like: Ref) -> Ref:
        """Where a slice arriving at ``rank`` lands: its output if it consumes,
        else scratch (clipped as ``like``, the slice it carries, for variable sizes)."""
        if rank in places_at:
            return out_ref(places_at[rank][0], lo, n)
        return self.b.scratch(rank, n, like=like)

    def forward(
        self, places_at, start: int, hops: int, first_landing: Ref, flag, key, lo: int, n: int, channel: int
    ) -> None:
        """Carry a finished slice from ``start`` on for ``hops`` hops."""
        landing = first_landing
        for k in range(1, hops + 1):
            z = (start + k) % self.R
            extra = [out_ref(p, lo, n) for p in places_at.get(z, [])[1:]]
            hop_key = (key[0] + k, *key[1:])
            if k < hops:
                nxt = self.landing(places_at, (z + 1) % self.R, lo, n, like=landing)
                nflag = self.b.flag((z + 1) % self.R)
                self.put(
                    hop_key, z, channel, Consume((flag,), "copy", (landing,), tuple(extra) + (nxt,)), Notify(nflag)
                )
                landing, flag = nxt, nflag
            elif extra:
                self.put(hop_key, z, channel, Consume((flag,), "copy", (landing,), tuple(extra)))
            else:
                self.put(hop_key, z, channel, Consume((flag,), "wait"))

    def copy_flow(self, fi: int, flow: Flow, size: int) -> None:
        (src,) = flow.sources
        s = src.rank
        places_at: dict[int, list] = {}
        for p in flow.consumers:
            places_at.setdefault(p.rank, []).append(p)
        hops = max((z - s) % self.R for z in places_at)
        for j, (lo, n) in enumerate(slices(flow.count, size, self.b.unit)):
            dsts = [out_ref(p, lo, n) for p in places_at.get(s, [])]
            steps: list[Step] = []
            if hops:
                landing = self.landing(places_at, (s + 1) % self.R, lo, n, like=in_ref(src, lo, n))
                flag = self.b.flag((s + 1) % self.R)
                dsts.append(landing)
                steps = [Stage(in_ref(src, lo, n), tuple(dsts)), Notify(flag)]
                self.put((0, j, fi), s, j, *steps)
                self.forward(places_at, s, hops, landing, flag, (0, j, fi), lo, n, j)
            else:
                self.put((0, j, fi), s, j, Stage(in_ref(src, lo, n), tuple(dsts)))

    def reduce_flow(self, fi: int, flow: Flow, slice_bytes: int) -> None:
        R, b = self.R, self.b
        places_at: dict[int, list] = {}
        for p in flow.consumers:
            places_at.setdefault(p.rank, []).append(p)
        for owner, (base, length) in enumerate(split_even(flow.count, R, b.unit)):
            chain = [(owner + 1 + i) % R for i in range(R)]  # ends at the owner
            hops_after = max(((z - owner) % R for z in places_at), default=0)
            size = _slice_elems(b, slice_bytes, length)
            for j, (lo, n) in enumerate(slices(length, size, b.unit)):
                at = base + lo
                acc, flag = None, None
                for i, y in enumerate(chain):
                    local = [in_ref(p, at, n) for p in flow.sources if p.rank == y]
                    if acc is None and not local:
                        continue
                    key = (i, j, fi, owner)
                    operands = ([acc] if acc is not None else []) + local
                    op = "reduce" if len(operands) > 1 else "copy"
                    if y != owner:
                        nxt = chain[i + 1]
                        slot, nflag = b.scratch(nxt, n, like=operands[0]), b.flag(nxt)
                        if acc is None and op == "copy":
                            self.put(key, y, j, Stage(operands[0], (slot,)), Notify(nflag))
                        else:
                            self.put(
                                key, y, j, Consume((flag,) if flag else (), op, tuple(operands), (slot,)), Notify(nflag)
                            )
                        acc, flag = slot, nflag
                        continue
                    dsts = [out_ref(p, at, n) for p in places_at.get(owner, [])]
                    tail: list[Step] = []
                    landing = None
                    if hops_after:
                        landing = self.landing(places_at, (owner + 1) % R, at, n, like=operands[0])
                        nflag = b.flag((owner + 1) % R)
                        dsts.append(landing)
                        tail = [Notify(nflag)]
                    waits = (flag,) if flag else ()
                    if not waits and op == "copy":
                        self.put(key, y, j, Stage(operands[0], tuple(dsts)), *tail)
                    else:
                        self.put(key, y, j, Consume(waits, op, tuple(operands), tuple(dsts)), *tail)
                    if hops_after:
                        self.forward(places_at, owner, hops_after, landing, nflag, key, at, n, j)

    def flush(self) -> None:
        for key, rank, channel, steps in sorted(self.blocks, key=lambda blk: blk[0]):
            self.b.add(rank, channel, *steps)


def _slice_elems(b: Builder, slice_bytes: int, length: int) -> int:
    if slice_bytes:
        return max(1, slice_bytes // b.inst.itemsize)
    auto = -(-length // (_AUTO_SLICES_PER_CHANNEL * b.channels))
    return max(auto, _MIN_AUTO_SLICE_BYTES // b.inst.itemsize)


def emit(b: Builder, params: dict[str, int]) -> None:
    ring = _Ring(b)
    for fi, flow in enumerate(b.inst.flows):
        if b.inst.op == "reduce":
            ring.reduce_flow(fi, flow, params["slice_bytes"])
        else:
            ring.copy_flow(fi, flow, _slice_elems(b, params["slice_bytes"], flow.count))
    ring.flush()


STRATEGY = Strategy("ring", "neighbour-to-neighbour, reducing on the way, pipelined by slice", emit)
