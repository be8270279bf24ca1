"""Small pooled variable launches as one run of elements (D59).

A pooled launch (variable.pools: no flags, few ops) whose ops hold little
at capacity spends its time on its prologue and memory round trips, not on
bandwidth. Here every thread of the grid takes single elements: it loads
the counts into registers itself (no barrier, no shared memory) and moves
one element with snac.cu's value_one, where pooled_code's blocks walk the
ops into var_move's split and vector loop for a few elements each.

Where the ops' sources allow it, a thread loads its element before the
counts come back (early_code): the counts then only say where to store
it, and the two round trips overlap.
"""

from __future__ import annotations

from purlin_bench.backends.cupy.codegen.variable import (
    SHARED,
    VarOp,
    count_loads,
    in_registers,
    pool_count,
    pool_typedef,
    slice_address,
)

# A pooled launch whose ops hold at most this many bytes at capacity (each op's
# window, counted once) runs flat (flat_code), not as blocks' shares (pooled_code).
# D59 (H100, 8 virtual ranks, skewed, flat vs pooled in one call): flat won every row from
# 256 B to 256 KiB S (1.0 MB of windows); pooled won all-gather-v's at 1 and 4 MiB S (2.6
# and 17 MB) and reduce-scatter-v's at 4 MiB.
FLAT_MAX_BYTES = 2 << 20

# "sources" loads every element of the ops' spans at capacity, the ones past the counts too
# (dropped): past this many bytes of spans those loads cost more than the round trip they
# hide. Session 27 (H100, 8 virtual ranks, early against flat in one call): early won
# all-gather-v by 0.3-1.1 us from 64 B to 4 KiB S, tied at 16 and 64 KiB, and lost from
# 256 KiB S (skewed 4.09 against 3.01 us, 1 MB of spans; uniform 3.51 against 2.90, 0.5 MB).
EARLY_SOURCES_MAX_BYTES = 256 << 10

# The loop's largest value is the total plus the grid's threads: a group's blocks are at
# most 32 of 512 threads (runtime/sizing.py), so 2**24 covers a thousand groups.
GRID_SLACK = 1 << 24


def flat(vops: list[VarOp | None], itemsize: int) -> bool:
    """Whether a pooled launch is small enough to run flat (FLAT_MAX_BYTES)."""
    return sum(v.window for v in vops if v is not None) * itemsize <= FLAT_MAX_BYTES


def _span(vop: VarOp, caps: tuple[int, ...]) -> int:
    """The most elements ``vop`` moves in any call: its window, less what its count's capacity cuts off."""
    return vop.window if vop.clip is None else max(0, min(vop.window, caps[vop.clip] - vop.at))


def _whole(vop: VarOp, caps: tuple[int, ...]) -> bool:
    """Whether ``vop`` moves exactly its count, every call (its window covers the count's capacity)."""
    return vop.clip is not None and vop.at == 0 and vop.window >= caps[vop.clip]


def early(ops, vops: list[VarOp | None], caps: tuple[int, ...], itemsize: int) -> str | None:
    """How a flat launch's loads may go before its counts come back (early_code), or None:

    - "sources": no count moves any op's sources (all-gather-v: each rank's input from 0),
      so element g of the ops' spans laid end to end (constants) has known addresses;
      only up to EARLY_SOURCES_MAX_BYTES of spans;
    - "run": every op moves its whole count and its sources lie where the counts of the
      ops before it end (reduce-scatter-v direct: element e of the call's run is element
      e of every source buffer), so element g of the sources needs no count either.
    """
    moving = [vops[k] for k, v in enumerate(vops) if v is not None]
    if not moving or not in_registers(moving):
        return None
    nsrc = [int(ops[k]["nsrc"]) for k, v in enumerate(vops) if v is not None]
    if all(not s.ids for v, n in zip(moving, nsrc) for s in v.slices[:n]):
        spans = sum(_span(vops[k], caps) for k, v in enumerate(vops) if v is not None)
        return "sources" if spans * itemsize <= EARLY_SOURCES_MAX_BYTES else None
    kinds = {int(ops[k]["op"]) for k, v in enumerate(vops) if v is not None}
    # One load serves every op: the same sources, moved the same way.
    if len(set(nsrc)) != 1 or len(kinds) != 1 or not all(_whole(v, caps) for v in moving):
        return None
    for j, v in enumerate(moving):
        before = sorted(u.clip for u in moving[:j])
        for s, first in zip(v.slices[: nsrc[0]], moving[0].slices):
            if (s.base, s.offset, sorted(s.ids)) != (first.base, first.offset, before):
                return None
    return "run"


def _store(vop: VarOp, nsrc: int, index: str) -> str:
    dsts = ", ".join(slice_address(s, True, index) for s in vop.slices[nsrc:])
    return f"char* const dst[{len(vop.slices) - nsrc}] = {{{dsts}}}; store_one(x, dst);"


def _value(vop: VarOp, nsrc: int, kind: str, index: str) -> str:
    srcs = ", ".join(slice_address(s, True, index) for s in vop.slices[:nsrc])
    return f"char* const src[{nsrc}] = {{{srcs}}}; return value_one({kind}, 0, {nsrc}, src);"


# After the first element (early_code). "sources": every element of END in turn, element h's
# load in flight while element g is stored, so a thread with two elements waits about one
# round trip for both (a copy's load is used only by the next store). "run": the elements
# the counts hold, as flat_code moves them (one round trip each: a reduction's adds wait
# for its loads before the store).
SOURCES_LOOP = [
    "      for (;;) {  // the next element's loads in flight while this one is stored",
    "        const pool_t h = g + step; const S y = h < END ? load(h) : x; store(g, x);",
    "        if (h >= END) break; g = h; x = y;",
    "      }",
]
RUN_LOOP = [
    "      if (g < total) store(g, x);",
    "      for (g += step; g < total; g += step) store(g, load(g));",
]


def early_code(ops, vops: list[VarOp | None], caps: tuple[int, ...], kinds: dict[int, str], how: str) -> list[str]:
    """A flat launch (flat_code) whose loads do not wait for the counts (``how``: early).
    Thread g takes element g of a run of constant length END: the ops' spans end to
    end ("sources"), or the sources' elements up to the sum of the counts' capacities
    ("run"). It loads (and reduces) its first element, then loads the counts; they
    only say whether to store it and where, so the two round trips overlap. Its
    other elements follow (SOURCES_LOOP, RUN_LOOP).

    The first load is written before the count loads, outside any loop: in a loop,
    nvcc hoisted the counts' clamps (loop-invariant) above the loop's loads, and the
    thread waited for the counts before it loaded (sm_90 SASS). Elements past the
    call's counts are loaded and dropped: at capacity the program reads them, so they
    lie in the buffers."""
    moving = [k for k, v in enumerate(vops) if v is not None]
    spans = [_span(vops[k], caps) for k in moving]
    end = sum(spans)
    lines = [
        pool_typedef(end + max(caps, default=0) + GRID_SLACK, "the elements' arithmetic"),
        f"    const pool_t END = {end}, step = (pool_t)(gridDim.x * blockDim.x);",
        "    pool_t g = (pool_t)(blockIdx.x * blockDim.x + threadIdx.x);",
        "    if (g < END) {",
        "      auto load = [&](pool_t g) -> S {  // element g's value, whatever the counts",
    ]
    kind = {k: kinds[int(ops[k]["op"])] for k in moving}
    nsrc = {k: int(ops[k]["nsrc"]) for k in moving}
    if how == "sources":
        for j, k in enumerate(moving):
            lines.append(f"        if (g < {sum(spans[: j + 1])}) {{ const pool_t i = g - {sum(spans[:j])};"
                         f" {_value(vops[k], nsrc[k], kind[k], 'i')} }}")
        lines.append("        return S();  // past END: never asked for")
    else:  # op 0's sources lie past no count: element g of the run is element g of each
        lines.append(f"        {_value(vops[moving[0]], nsrc[moving[0]], kind[moving[0]], 'g')}")
    lines += ["      };", "      S x = load(g);  // before the counts' loads: the round trips overlap"]
    lines += ["  " + line for line in count_loads([vops[k] for k in moving], caps)]
    lines += [f"      const pool_t n{j} = {pool_count(vops[k], caps, True)};" for j, k in enumerate(moving)]
    if how == "run":
        lines.append(f"      const pool_t total = {' + '.join(f'n{j}' for j in range(len(moving)))};")
    lines.append("      auto store = [&](pool_t g, S x) {  // where the counts take element g, if anywhere")
    if how == "sources":
        for j, k in enumerate(moving):
            lines.append(f"        if (g < {sum(spans[: j + 1])}) {{ const pool_t i = g - {sum(spans[:j])};"
                         f" if (i < n{j}) {{ {_store(vops[k], nsrc[k], 'i')} }} return; }}")
    else:
        lines.append("        pool_t i = g;  // the element's index in its op")
        for j, k in enumerate(moving):
            lines.append(f"        if (i < n{j}) {{ {_store(vops[k], nsrc[k], 'i')} return; }}")
            lines.append(f"        i -= n{j};")
    lines += ["      };", *(SOURCES_LOOP if how == "sources" else RUN_LOOP), "    }"]
    return lines


def flat_code(ops, vops: list[VarOp | None], caps: tuple[int, ...], kinds: dict[int, str],
              itemsize: int) -> list[str]:
    """Every op of a pooled launch as one run of elements, element e of it
    taken by thread e of the grid (then e + the grid's threads): it finds
    its op by the counts before it and moves that one element (snac.cu
    move_one); early_code where the ops' sources let a thread load first."""
    moving = [k for k, v in enumerate(vops) if v is not None]
    if not moving:
        return []
    how = early(ops, vops, caps, itemsize)
    if how:
        return early_code(ops, vops, caps, kinds, how)
    used = [vops[k] for k in moving]
    registers = in_registers(used)
    lines = [*([] if registers else [f"  __shared__ i64 {SHARED}[{len(caps)}];"]), *count_loads(used, caps)]
    lines.append(pool_typedef(sum(v.window for v in used) + max(caps, default=0) + GRID_SLACK,
                              "the elements' arithmetic"))
    for j, k in enumerate(moving):
        lines.append(f"    const pool_t n{j} = {pool_count(vops[k], caps, registers)};")
    lines.append(f"    const pool_t total = {' + '.join(f'n{j}' for j in range(len(moving)))};")
    lines.append(
        "    for (pool_t e = (pool_t)(blockIdx.x * blockDim.x + threadIdx.x); e < total;"
        " e += (pool_t)(gridDim.x * blockDim.x)) {"
    )
    lines.append("      pool_t i = e;  // the element's index in its op")
    for j, k in enumerate(moving):
        nsrc = int(ops[k]["nsrc"])
        srcs = ", ".join(slice_address(s, registers, "i") for s in vops[k].slices[:nsrc])
        dsts = ", ".join(slice_address(s, registers, "i") for s in vops[k].slices[nsrc:])
        ndst = len(vops[k].slices) - nsrc
        lines.append(
            f"      if (i < n{j}) {{ char* const src[{nsrc}] = {{{srcs}}}; char* const dst[{ndst}] = {{{dsts}}};"
            f" move_one({kinds[int(ops[k]['op'])]}, 0, {nsrc}, {ndst}, src, dst); continue; }}"
        )
        lines.append(f"      i -= n{j};")
    lines.append("    }")
    return lines
