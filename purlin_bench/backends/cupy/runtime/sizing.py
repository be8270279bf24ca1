"""How many thread blocks a (rank, channel) group gets: from the data a
launch moves, capped by what the data can use. Pure NumPy over lowered step
tables: tested without a GPU."""

from __future__ import annotations

from typing import Sequence

from purlin_bench.backends.cupy.codegen.lower import OP_REDUCE, Lowered, flag_id, lower
from purlin_bench.program.model import Program

MAX_BLOCKS = 32


def copies_only(lowered: Sequence[Lowered]) -> bool:
    """Whether no device op reduces: such programs run the copy-only kernel."""
    return not any((low.ops["op"] == OP_REDUCE).any() for low in lowered)


def useful_blocks(lowered: Sequence[Lowered], itemsize: int, threads: int) -> int:
    """The most blocks a group can keep busy: one 16-byte vector per thread of
    its largest op. A block past that moves no data but still reads the op,
    waits, and adds its share to every notify flag (each flag counts all of a
    group's blocks). Tuned configurations of 16-32 blocks at <= 64 KiB ran
    1.04-1.2x faster capped, and some that could not fit at once run now
    (docs/decisions.md, D11)."""
    largest = max((int(low.ops["count"].max()) for low in lowered if len(low.ops)), default=0)
    return max(1, -(-largest * itemsize // (threads * 16)))


def data_blocks(lowered: Sequence[Lowered], itemsize: int, block_bytes: int) -> int:
    """The automatic block count before any occupancy cap: one block per
    ``block_bytes`` of the largest op's traffic (its sources and
    destinations), at most MAX_BLOCKS."""
    work = max(
        (int((low.ops["count"] * (low.ops["nsrc"] + low.ops["ndst"])).max()) for low in lowered if len(low.ops)),
        default=0,
    )
    return int(min(MAX_BLOCKS, max(1, -(-work * itemsize // block_bytes))))


def group_blocks(requested: int, auto: int, useful: int, cap_blocks: bool = True) -> int:
    """Blocks a group: the automatic count, or a requested one as a ceiling
    at the larger of what the data can use and the automatic count. That
    automatic count is not cut to the data: the few idle blocks it leaves in
    64-256 KiB reductions measured 1-4% faster than none
    (docs/decisions.md, D11)."""
    if not requested:
        return auto
    return min(requested, max(auto, useful)) if cap_blocks else min(requested, MAX_BLOCKS)


def sizing_lowerings(program: Program, fused: bool, datapath: str) -> list[Lowered]:
    """What a runner sizes its blocks and picks its kernel by: the fused
    launch, or with one launch per rank every rank's own, never only this
    process's. Each notify flag counts all of a group's blocks and a waiter
    expects its own count, so every process of a run needs the same one: a
    broadcast's root has data to move and its peers none, and sized by its
    own ops alone a peer launched one block where the root waited for up to
    32 (rooted collectives past about 4 KiB timed out with ranks in processes)."""
    if fused:
        return [lower(program, list(range(program.ranks)), True, datapath, flag_id)]
    return [lower(program, [r], False, datapath, flag_id) for r in range(program.ranks)]
