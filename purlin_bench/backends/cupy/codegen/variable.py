"""The compiled datapath for sizes that come per call (issue 31, D46).

A variable program's slices move with the call's counts (lower.py's
variable_table says how: a slice lies at its packed offset plus the counts
of the chunks before it; an op moves its window clipped by one count). The
interpreter reads all that from the size table per op, per call. Here it
becomes code: each (rank, channel) group loads the counts its ops use once,
clamped to their capacities (constants), into registers; every op's count
and slice addresses are then sums of those registers and constants. What a
count decides at run time stays a run-time value: the vector split (an
address modulo 16 bytes) is worked out per op by every thread from
registers, and a barrier is kept between two ops that share a buffer one
of them writes unless their ranges are disjoint for every call's counts
(may_overlap: a packed chunk ends where the next one's counts begin).

One build serves every call whatever its counts, as the interpreter's does,
and a count outside its capacity is reported the interpreter's way
(snac.cu's report_bad_count) by the grid's last thread.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from purlin_bench.backends.cupy.codegen.lower import OFFSET_BITS, VAR_RECORD, Lowered

# Appended to the generated kernel's prologue for a variable program only:
# the fixed programs' source (and so their build cache) stays as it was.
PROLOGUE = r"""
// A count of the call clamped to its capacity: no count a GPU computed can
// move a slice out of its buffer.
__device__ __forceinline__ i64 clamp_count(i64 n, i64 cap) { return n < 0 ? 0 : (n > cap ? cap : n); }

// One op whose slice addresses are known only at run time: the split snac.cu's
// interpreter works out (split_of), by every thread from its registers.
template <int NS, int ND>
__device__ __forceinline__ void var_move(int kind, i64 count, char* const (&src)[NS], char* const (&dst)[ND],
                                         i64 tid, i64 stride) {
    const u64 mis = (u64)src[0] & 15u;
    bool srcs = true, all = true;
#pragma unroll
    for (int k = 1; k < NS; ++k) srcs &= ((u64)src[k] & 15u) == mis;
#pragma unroll
    for (int k = 0; k < ND; ++k) all &= ((u64)dst[k] & 15u) == mis;
    const int split = split_of(mis, srcs, srcs && all, ND);
    move_op<PURLIN_UNROLL>(kind, count, NS, ND, src, dst, split, head_of(split, mis, count), tid, stride);
}

// One element loaded before the call's counts were known, stored to every destination.
template <int ND>
__device__ __forceinline__ void store_one(S x, char* const (&dst)[ND]) {
#pragma unroll
    for (int d = 0; d < ND; ++d) *(S*)dst[d] = x;
}
"""


@dataclass(frozen=True)
class VarSlice:
    base: int  # slice base index (3 * rank + buffer)
    offset: int  # elements past the base with every count before it 0
    ids: tuple[int, ...]  # the counts whose sum it lies past


@dataclass(frozen=True)
class VarOp:
    """One op of a variable launch as the code computes it: ``window``
    elements from ``at`` on, clipped by count ``clip`` (None: not clipped)."""

    clip: int | None
    at: int
    window: int
    slices: tuple[VarSlice, ...]  # sources, then destinations

    def ids(self) -> set[int]:
        return ({self.clip} if self.clip is not None else set()) | {i for s in self.slices for i in s.ids}


def _ends_before(a: VarSlice, op: VarOp, b: VarSlice) -> bool:
    """Whether slice ``a`` of ``op`` ends where ``b`` begins, or before, for
    every call's counts. ``a`` begins past the counts ``a.ids`` and spans at
    most ``op.window`` elements, and at most ``count[op.clip] - op.at`` (none
    when that is not positive); ``b`` begins past ``b.ids``. Counts are never
    negative (clamped), so holding ``b.ids`` a superset of the counts bounding
    ``a``'s end, with ``a``'s constant part no larger, proves it."""
    left = Counter(b.ids)
    left.subtract(a.ids)
    if min(left.values(), default=0) < 0:
        return False
    if a.offset + op.window <= b.offset:
        return True
    return op.clip is not None and left[op.clip] > 0 and a.offset - op.at <= b.offset


def may_overlap(before: list[tuple[VarOp, int]], op: VarOp, nsrc: int, where) -> bool:
    """Whether ``op`` (``nsrc`` sources) may touch an element an op in
    ``before`` ((op, its sources) moved since the last barrier) touched,
    either writing, for some call's counts; ``where`` maps a slice base to
    its physical buffer and the element there it starts at. Such a pair
    needs a barrier between them."""
    for prev, prev_nsrc in before:
        for i, a in enumerate(prev.slices):
            for j, b in enumerate(op.slices):
                (buf_a, at_a), (buf_b, at_b) = where(a.base), where(b.base)
                if buf_a != buf_b or (i < prev_nsrc and j < nsrc):
                    continue  # other buffers, or both read
                # Offsets in the buffer, not from each slice's own base (in place, two bases share one).
                a, b = replace(a, offset=a.offset + at_a), replace(b, offset=b.offset + at_b)
                if not (_ends_before(a, prev, b) or _ends_before(b, op, a)):
                    return True
    return False


def caps_of(lowered: Lowered) -> tuple[int, ...]:
    vt = lowered.sizes
    return tuple(int(c) for c in vt[3 : 3 + int(vt[0])])


def var_ops(lowered: Lowered) -> list[VarOp]:
    """The lowered ops with their size-table records read (None for an op that moves nothing)."""
    vt, ops = lowered.sizes, lowered.ops
    records, ids = int(vt[1]), int(vt[2])
    out = []
    for o, op in enumerate(ops):
        if not int(op["op"]):
            out.append(None)
            continue
        rec = vt[records + o * VAR_RECORD : records + (o + 1) * VAR_RECORD]
        words = [*op["src"][: int(op["nsrc"])], *op["dst"][: int(op["ndst"])]]
        slices = []
        for k, word in enumerate(words):
            first, n = int(rec[2 + 2 * k]), int(rec[3 + 2 * k])
            slices.append(
                VarSlice(
                    int(word) >> OFFSET_BITS,
                    int(word) & ((1 << OFFSET_BITS) - 1),
                    tuple(int(i) for i in vt[ids + first : ids + first + n]),
                )
            )
        clip = None if int(rec[0]) < 0 else int(rec[0])
        out.append(VarOp(clip, int(rec[1]), int(op["count"]), tuple(slices)))
    return out


# A group using more counts than this keeps them in shared memory, not in
# registers: an all-to-all-v two-shot group at 8 ranks reads all 64, and
# held in registers (two each) they spilled 168 bytes (nvcc, sm_90).
MAX_COUNT_REGISTERS = 16
SHARED = "purlin_counts"  # the shared array's name


def group_counts(vops: list[VarOp | None]) -> list[int]:
    """The counts a group's ops read."""
    return sorted(set().union(*(v.ids() for v in vops if v is not None)))


def in_registers(vops: list[VarOp | None]) -> bool:
    """Whether a group's ops read few enough counts to hold them in registers."""
    return len(group_counts(vops)) <= MAX_COUNT_REGISTERS


def count_loads(vops: list[VarOp | None], caps: tuple[int, ...], shared: bool = False) -> list[str]:
    """A group's counts, loaded once at its start (all at once) and clamped:
    into registers (``c<i>``), or past MAX_COUNT_REGISTERS (or ``shared``) by
    one thread each into shared memory, read after a barrier."""
    used = group_counts(vops)
    if in_registers(vops) and not shared:
        return [f"    const i64 c{i} = clamp_count(__ldg(counts + {i}), {caps[i]}ll);" for i in used]
    if used == list(range(len(used))) and len({caps[i] for i in used}) == 1:
        # Counts 0..N-1 under one capacity (the built-ins): thread k loads count k. The
        # id and cap arrays below live in local memory, and every thread of the block
        # fills them (96 bytes a thread at 8 counts) before any count is read.
        return [
            f"    for (int k = threadIdx.x; k < {len(used)}; k += blockDim.x)"
            f" {SHARED}[k] = clamp_count(__ldg(counts + k), {caps[0]}ll);",
            "    __syncthreads();  // the group's counts, in shared memory",
        ]
    ids = ", ".join(map(str, used))
    bounds = ", ".join(f"{caps[i]}ll" for i in used)
    return [
        f"    {{ const int id[{len(used)}] = {{{ids}}}; const i64 cap[{len(used)}] = {{{bounds}}};",
        f"      for (int k = threadIdx.x; k < {len(used)}; k += blockDim.x)"
        f" {SHARED}[id[k]] = clamp_count(__ldg(counts + id[k]), cap[k]); }}",
        "    __syncthreads();  // the group's counts, in shared memory",
    ]


def shared_counts(lowered: Lowered, vops: list[VarOp | None]) -> list[str]:
    """The kernel's shared array of counts, where a group keeps them there."""
    if all(in_registers(vops[begin:end]) for begin, end, _, _ in lowered.groups.tolist()):
        return []
    return [f"  __shared__ i64 {SHARED}[{len(caps_of(lowered))}];"]


def _count(i: int, registers: bool) -> str:
    return f"c{i}" if registers else f"{SHARED}[{i}]"


def count_code(vop: VarOp, registers: bool) -> str:
    """The elements an op moves in this call, from the counts count_loads left."""
    if vop.clip is None:
        return f"{vop.window}ll"
    left = f"{_count(vop.clip, registers)} - {vop.at}ll" if vop.at else _count(vop.clip, registers)
    return f"min(max({left}, (i64)0), (i64){vop.window})"


def slice_address(s: VarSlice, registers: bool, first: str | None = None) -> str:
    """A slice's address in this call: past the counts before it and ``first`` elements."""
    shift = "".join(f" + {_count(i, registers)}" for i in s.ids) + (f" + {first}" if first else "")
    return f"b{s.base} + ({s.offset}ll{shift}) * (i64)sizeof(S)"


def move_code(vop: VarOp, nsrc: int, kind: str, registers: bool, part: tuple[str, str] | None = None) -> str:
    """One op's data movement: its count and slice addresses from the counts
    count_loads left (in registers when ``registers``, else in shared memory),
    split over the group's threads; ``part`` (first element, count): only
    those of its elements, split over the block's threads (pooled_code)."""

    srcs = ", ".join(slice_address(s, registers, part and part[0]) for s in vop.slices[:nsrc])
    dsts = ", ".join(slice_address(s, registers, part and part[0]) for s in vop.slices[nsrc:])
    ndst = len(vop.slices) - nsrc
    count, lanes = (part[1], "threadIdx.x, blockDim.x") if part else (count_code(vop, registers), "tid, stride")
    # A block's part of an op is often empty: it skips the op's addresses too.
    guard = f"if ({count} > 0) " if part else ""
    return (
        f"    {guard}{{ char* const src[{nsrc}] = {{{srcs}}}; char* const dst[{ndst}] = {{{dsts}}};"
        f" var_move({kind}, {count}, src, dst, {lanes}); }}"
    )


# Most ops a pooled launch takes (D53, H100, 8 virtual ranks, skewed): all-gather-v's 8 ran
# 1.00x torch pooled against 0.75x grouped, all-to-all-v's 64 0.14-0.46x against 0.41-0.97x
# (512 KiB-2 MiB; why it lost was not profiled).
POOL_MAX_OPS = 8


def few_enough(vops: list[VarOp | None]) -> bool:
    """Whether a launch has few enough ops that move data to pool them (POOL_MAX_OPS)."""
    return sum(v is not None for v in vops) <= POOL_MAX_OPS


def pools(groups: list, ops, vops: list[VarOp | None], where) -> bool:
    """Whether every block of a launch whose ops wait on and notify nothing
    (a fused launch drops ready and done) may take a share of every op
    (pooled_code): at most POOL_MAX_OPS of them, and no two ops of a group
    touch an element one of them writes, for any call's counts. Ops of
    different groups already run in no order; a group's own ops were
    ordered by its threads' program order."""
    if not few_enough(vops):
        return False
    for begin, end, _, _ in groups:
        moved: list[tuple[VarOp, int]] = []
        for k in range(begin, end):
            if vops[k] is None:
                continue
            nsrc = int(ops[k]["nsrc"])
            if may_overlap(moved, vops[k], nsrc, where):
                return False
            moved.append((vops[k], nsrc))
    return True


def pool_typedef(largest: int, what: str) -> str:
    """``pool_t``, the type of a pooled or flat launch's arithmetic: 32-bit (fewer
    registers and instructions) where ``largest``, the largest value the caller's
    arithmetic reaches, fits; each caller says why its bound holds."""
    return f"    typedef {'int' if largest < 2**31 else 'i64'} pool_t;  // {what}"


def pool_count(vop: VarOp, caps: tuple[int, ...], registers: bool = False) -> str:
    """An op's count in a pooled launch, as ``pool_t``: its count as loaded
    (clamped to its capacity then), clipped only where its window starts
    past 0 or ends before that capacity."""
    if vop.clip is None:
        return f"(pool_t){vop.window}"
    count = f"(pool_t){_count(vop.clip, registers)}"
    if vop.at == 0 and vop.window >= caps[vop.clip]:
        return count
    left = f"{count} - {vop.at}" if vop.at else count
    return f"min(max({left}, (pool_t)0), (pool_t){vop.window})"


def pooled_code(ops, vops: list[VarOp | None], caps: tuple[int, ...], kinds: dict[int, str]) -> list[str]:
    """Every op of the launch as one range of work, cut evenly over all its
    blocks from this call's counts: each block moves the elements of its
    share, op by op. Under skewed counts a rank's (or a flow's) fixed share
    of blocks left the others idle while it moved most of the bytes (D53).
    An element weighs the slices it passes through (an 8-way fan-out copy
    moves 9), so a block's share is of bytes moved, not of elements.

    Every warp walks the ops in order up to its share, serial work before
    its first load: so an op before the share costs a count read and an
    add, and the arithmetic is 32-bit wherever the launch's weighted
    capacity allows. A kernel that worked out every op's part in 64-bit ran
    5x the fixed kernel's instructions on the same grid; this walk took
    1-18% off all-gather-v and reduce-scatter-v at 16 B-4 MiB, no row slower (D56)."""
    moving = [k for k, v in enumerate(vops) if v is not None]
    if not moving:
        return []
    # Counts in shared memory: the registers go to the ops (held in 16
    # registers, an 8-source reduce-scatter-v spilled 4 bytes on sm_100).
    used, registers = [vops[k] for k in moving], False
    lines = [f"  __shared__ i64 {SHARED}[{len(caps)}];", *count_loads(used, caps, shared=True)]
    weights = [len(vops[k].slices) for k in moving]
    bound = sum(vops[k].window * w for k, w in zip(moving, weights))
    # A count is cast to pool_t before its window clips it: its capacity must fit too.
    bound = max([bound, *(caps[vops[k].clip] for k in moving if vops[k].clip is not None)])
    # The walk's largest value is the total plus the grid, less one (a block's share ends
    # by then); grids are thousands of blocks, so twice the bound leaves room for it.
    lines.append(pool_typedef(2 * bound, "the walk's arithmetic"))
    total = " + ".join(f"{pool_count(vops[k], caps)} * {w}" for k, w in zip(moving, weights))
    lines.append(f"    const pool_t total = {total};")
    lines.append("    const pool_t per = (total + (pool_t)gridDim.x - 1) / (pool_t)gridDim.x;")
    lines.append("    const pool_t lo = (pool_t)blockIdx.x * per, hi = min(lo + per, total);")
    # A block past the call's total has no share: it would walk every op to find none.
    lines.append("    if (lo >= hi) return;")
    lines.append("    pool_t at = 0;  // where the op's weighted range begins")
    for k, w in zip(moving, weights):
        # Elements e with lo <= at + e*w < hi: rounding both ends up tiles each op over the blocks.
        lines.append(f"    {{ const pool_t n = {pool_count(vops[k], caps)} * {w};")
        lines.append(
            f"      if (at + n > lo) {{ const pool_t a = max(lo - at, (pool_t)0), b = min(hi - at, n);"
            f" const pool_t first = (a + {w - 1}) / {w}, last = (b + {w - 1}) / {w};"
        )
        lines.append("    " + move_code(vops[k], int(ops[k]["nsrc"]), kinds[int(ops[k]["op"])], registers,
                                        ("first", "last - first")) + " }")
        # Past its share a block is done: with 64 ops (all-to-all-v, 8 ranks) most blocks look at a few.
        lines.append("      at += n; if (at >= hi) return; }")
    return lines


def check_code(caps: tuple[int, ...]) -> list[str]:
    """The grid's last thread reports the first count outside its capacity, its loads issued
    together. Not thread 0 of block 0, which moves a flat launch's element 0: its check's
    loads (a round trip of their own, not shared with the count loads) delayed that element;
    the last thread of a small launch has no element to move."""
    lines = [
        "  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == blockDim.x - 1) {",
        "    int bad = -1; i64 seen = 0;",
    ]
    # Last to first, so the first bad count is the one left in `bad`.
    for i in reversed(range(len(caps))):
        lines.append(
            f"    {{ const i64 n = __ldg(counts + {i}); if (n < 0 || n > {caps[i]}ll) {{ bad = {i}; seen = n; }} }}"
        )
    lines.append("    if (bad >= 0) report_bad_count(status, bad, seen);")
    lines.append("  }")
    return lines
