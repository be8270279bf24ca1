"""Lower a Program to the device step table that atoms/snac.cu interprets.

Pure NumPy, so it is tested without a GPU. The table holds one fixed-size
``Op`` per device operation (wait on flags, copy or reduce, notify flags) and
one ``Group`` per (rank, channel) list; each group is walked by ``blocks``
thread blocks.

Two rewrites happen here, both justified by how the launch runs:

* **fused launch** (every rank in one kernel): ``ready`` and ``done`` notifies,
  and the waits on them, are dropped. They say "my buffers are in this call"
  and "I no longer touch yours"; one launch begins after every rank's inputs
  are written and ends after every rank finished, which says both.
* **copy-engine stages** (``datapath="ce"``): the stages that open a list
  (only stages and notifies before them) read data ready at launch, so they
  run as ``cudaMemcpyAsync`` before the kernel; the notifies that follow them
  are then already true and are dropped with their waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from purlin_bench.base.errors import ExecutionError
from purlin_bench.program.model import Consume, FlagRef, Notify, Program, Ref, Stage

MAX_SRC = MAX_DST = MAX_WAIT = MAX_NOTIFY = 16
# Words per op of a variable program's size table (variable_table; VAR_RECORD in atoms/snac.cu).
VAR_RECORD = 2 + 2 * (MAX_SRC + MAX_DST)
# Copy-engine copies one call may issue: each is a cudaMemcpyAsync and a
# node of every captured graph, so a program hoisting thousands would spend
# its time in capture and launch; refusing keeps a tuner trial bounded.
MAX_CE_COPIES = 1024
OFFSET_BITS = 40
OP_NONE, OP_COPY, OP_REDUCE = 0, 1, 2
BUFFER_INDEX = {"in": 0, "out": 1, "scratch": 2}

# Mirrors `struct Op` in atoms/snac.cu field for field (608 bytes, no padding).
OP_DTYPE = np.dtype(
    [
        ("count", "<i8"),
        ("op", "<i4"),
        ("nsrc", "<i4"),
        ("ndst", "<i4"),
        ("nwait", "<i4"),
        ("nnotify", "<i4"),
        ("step", "<i4"),
        ("src", "<i8", (MAX_SRC,)),
        ("dst", "<i8", (MAX_DST,)),
        ("wait", "<u8", (MAX_WAIT,)),
        ("notify", "<u8", (MAX_NOTIFY,)),
        ("wait_id", "<i4", (MAX_WAIT,)),
    ]
)
assert OP_DTYPE.itemsize == 608


def buffer_index(ref: Ref) -> int:
    return ref.rank * 3 + BUFFER_INDEX[ref.buf]


def pack(ref: Ref, caps: tuple[int, ...] = ()) -> int:
    """A slice as one word: its buffer and its offset when every count in
    its ``base`` is 0 (the kernel adds those counts at run time; the
    validator proved that part is not negative)."""
    return (buffer_index(ref) << OFFSET_BITS) | (ref.offset - sum(caps[b] for b in ref.base))


def flag_id(flag: FlagRef) -> int:
    return (flag.rank << 20) | flag.index


@dataclass(frozen=True)
class CeCopy:
    """A stage moved to a copy engine: ``src`` to ``dst`` before the kernel."""

    rank: int
    src: Ref
    dst: Ref


@dataclass(frozen=True)
class Lowered:
    ops: np.ndarray  # OP_DTYPE
    groups: np.ndarray  # int32 [n, 4]: begin, end, rank, channel
    ce_copies: tuple[CeCopy, ...]
    # A variable-size program's slices as functions of the counts (variable_table); None for fixed sizes.
    sizes: np.ndarray | None = None

    @property
    def group_count(self) -> int:
        return len(self.groups)


@dataclass
class _Op:
    step: int
    kind: int = OP_NONE
    count: int = 0
    srcs: tuple[Ref, ...] = ()
    dsts: tuple[Ref, ...] = ()
    waits: tuple[FlagRef, ...] = ()
    notifies: list = None

    def __post_init__(self):
        self.notifies = list(self.notifies or [])


def _dropped_flags(program: Program, fused: bool, ce: bool) -> tuple[set[FlagRef], set[tuple[int, int, int]]]:
    """Flags whose notify is elided, and the (rank, channel, step) stages hoisted to copy engines."""
    dropped: set[FlagRef] = set()
    hoisted: set[tuple[int, int, int]] = set()
    for sid, step in program.steps():
        if fused and isinstance(step, Notify) and step.role in ("ready", "done"):
            dropped.add(step.flag)
    if ce and fused:
        for rank, chans in enumerate(program.lists):
            for channel, steps in enumerate(chans):
                for index, step in enumerate(steps):
                    if isinstance(step, Stage):
                        if step.dsts:
                            hoisted.add((rank, channel, index))
                    elif isinstance(step, Notify):
                        if step.role == "data":
                            dropped.add(step.flag)
                    elif not (step.op == "wait" and set(step.waits) <= dropped):
                        break  # a real wait or data: what follows may depend on the kernel
    return dropped, hoisted


def lower(
    program: Program, ranks: list[int], fused: bool, datapath: str, flag_address: Callable[[FlagRef], int]
) -> Lowered:
    """The step table of the launch that runs ``ranks`` of ``program``."""
    if datapath not in ("sm", "ce"):
        raise ExecutionError(f"datapath must be 'sm' or 'ce', got {datapath!r}")
    if program.variable and datapath == "ce":
        # A copy engine's size is fixed when the call is enqueued; counts in device memory are not known then.
        raise ExecutionError("datapath 'ce' needs sizes known on the host; a variable-size program runs on SMs (sm)")
    dropped, hoisted = _dropped_flags(program, fused, datapath == "ce")
    ops: list[_Op] = []
    groups: list[tuple[int, int, int, int]] = []
    ce: list[CeCopy] = []
    for rank in ranks:
        for channel, steps in enumerate(program.lists[rank]):
            begin = len(ops)
            for index, step in enumerate(steps):
                if isinstance(step, Stage):
                    if not step.dsts:
                        continue  # staged in place: nothing moves
                    if (rank, channel, index) in hoisted:
                        ce.extend(CeCopy(rank, step.src, d) for d in step.dsts)
                        continue
                    for at in range(0, len(step.dsts), MAX_DST):
                        ops.append(_Op(index, OP_COPY, step.src.count, (step.src,), step.dsts[at : at + MAX_DST]))
                elif isinstance(step, Notify):
                    if step.flag in dropped:
                        continue
                    prev = ops[-1] if len(ops) > begin else None
                    if prev is not None and len(prev.notifies) < MAX_NOTIFY:
                        prev.notifies.append(step.flag)
                    else:
                        ops.append(_Op(index, notifies=[step.flag]))
                elif isinstance(step, Consume):
                    waits = tuple(f for f in step.waits if f not in dropped)
                    while len(waits) > MAX_WAIT:  # more waits than one op holds: wait-only ops first
                        ops.append(_Op(index, waits=waits[:MAX_WAIT]))
                        waits = waits[MAX_WAIT:]
                    if step.op == "wait":
                        if waits:
                            ops.append(_Op(index, waits=waits))
                        continue
                    if len(step.srcs) > MAX_SRC:
                        raise ExecutionError(
                            f"rank {rank} channel {channel} step {index} reduces {len(step.srcs)} sources; "
                            f"the GPU datapath takes at most {MAX_SRC} per step (use ring for more ranks)"
                        )
                    kind = OP_REDUCE if step.op == "reduce" and len(step.srcs) > 1 else OP_COPY
                    for at in range(0, len(step.dsts), MAX_DST):
                        ops.append(
                            _Op(
                                index,
                                kind,
                                step.srcs[0].count,
                                step.srcs,
                                step.dsts[at : at + MAX_DST],
                                waits if at == 0 else (),
                            )
                        )
            if len(ops) > begin:
                groups.append((begin, len(ops), rank, channel))
    table = np.zeros(len(ops), dtype=OP_DTYPE)
    for k, op in enumerate(ops):
        row = table[k]
        row["count"], row["op"], row["step"] = op.count, op.kind, op.step
        row["nsrc"], row["ndst"], row["nwait"], row["nnotify"] = (
            len(op.srcs),
            len(op.dsts),
            len(op.waits),
            len(op.notifies),
        )
        for i, ref in enumerate(op.srcs):
            row["src"][i] = pack(ref, program.count_caps)
        for i, ref in enumerate(op.dsts):
            row["dst"][i] = pack(ref, program.count_caps)
        for i, flag in enumerate(op.waits):
            row["wait"][i] = flag_address(flag)
            row["wait_id"][i] = flag_id(flag)
        for i, flag in enumerate(op.notifies):
            row["notify"][i] = flag_address(flag)
    if len(ce) > MAX_CE_COPIES:
        raise ExecutionError(
            f"datapath 'ce' would issue {len(ce)} copies per call (at most {MAX_CE_COPIES}); "
            f"use datapath sm, larger slices or fewer channels"
        )
    group_table = np.array(groups, dtype=np.int32).reshape(-1, 4)
    sizes = variable_table(program, ops) if program.variable else None
    return Lowered(table, group_table, tuple(ce), sizes)


def variable_table(program: Program, ops: list[_Op]) -> np.ndarray:
    """What the kernel needs to size a variable program's slices from the
    call's counts in device memory (int32; mirrors snac.cu's ``VAR_*``):

    * ``[0]`` the number of counts N, ``[1]`` where the op records start,
      ``[2]`` where the count ids start, ``[3:3+N]`` each count's capacity
      (the kernel clamps every count read to 0..capacity, so a bad count on
      the device can never move a slice out of its buffer);
    * one record of ``VAR_RECORD`` words per op: the count that clips its
      window (-1: none) and the window's start, then per slice (sources,
      then destinations) where its ``base`` begins among the count ids and
      how many it has (the counts of the chunks before it in its buffer);
    * the count ids."""
    caps = program.count_caps
    if any(cap >= 2**31 for cap in caps):
        raise ExecutionError(f"a count's capacity of {max(caps)} elements is past the GPU datapath's int32 sizes")
    records = np.zeros((len(ops), VAR_RECORD), dtype=np.int32)
    ids: list[int] = []
    for k, op in enumerate(ops):
        refs = (*op.srcs, *op.dsts)
        clip = refs[0] if refs else None
        records[k, 0] = -1 if clip is None or clip.var is None else clip.var
        records[k, 1] = 0 if clip is None else clip.at
        for i, ref in enumerate(refs):
            records[k, 2 + 2 * i] = len(ids)
            records[k, 3 + 2 * i] = len(ref.base)
            ids.extend(ref.base)
    head = 3 + len(caps)
    header = np.array([len(caps), head, head + records.size, *caps], dtype=np.int32)
    return np.concatenate([header, records.ravel(), np.array(ids, dtype=np.int32)])
