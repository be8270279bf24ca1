"""What every strategy shares: parameters, slicing, and the program builder.

A strategy reads an :class:`~purlin_bench.spec.Instance`'s flows and emits the
*data* steps of a program (stages, consumes and the data notifies between
them). The builder then adds the call protocol that every program needs when
ranks run in separate launches (:func:`add_call_protocol`): a ``ready`` notify
before a peer touches a rank's buffers and a ``done`` notify after, so that a
rank never leaves a call while a peer still reads or writes its memory.
A strategy marked ``parity`` (push-parity) drops both where a rank only
writes a peer's scratch and waits on that peer, and its program alternates
two halves of scratch by call instead (program/model.py).

Variable sizes need nothing of a strategy but to build its slices with
:func:`in_ref`, :func:`out_ref` and :meth:`Builder.scratch` (``like=`` the
slice it will hold): an instance of a ``count: variable`` spec is laid out at
capacity, its places say which per-call count sizes them, and these helpers
carry that onto every slice (model.py: offsets after the chunks before it,
counts clipped to the call's). Slices cut a chunk's capacity into windows; at
run time a window past the chunk's count moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from purlin_bench.base.config import Param
from purlin_bench.base.errors import ProgramError
from purlin_bench.program.model import (PARITY_SCHEMA, VARIABLE_SCHEMA, Consume, FlagRef, Notify, Program, Ref, Stage,
                                        Step)
from purlin_bench.spec.instance import Flow, Instance, key_text

# Bytes every slice boundary is aligned to where the count allows: the Atom
# datapath moves 16-byte vectors, and slices on 16-byte boundaries let it.
ALIGN_BYTES = 16


# Most channels a rank may have. Each is a thread-block group on a GPU; 64
# per rank is already more groups than an H200's 132 SMs hold for 8 ranks, and
# a program's steps grow with channels against derive.MAX_STEPS. Without a
# bound, --channels 100000 spent minutes building empty step lists.
MAX_CHANNELS = 64

COMMON_PARAMS = (
    Param("slice_bytes", 0, minimum=0, help="bytes per slice (pipelining unit); 0 picks per strategy"),
    Param(
        "channels",
        1,
        minimum=1,
        maximum=MAX_CHANNELS,
        help="independent step lists per rank (thread-block groups on a GPU)",
        why=f"each channel is a thread-block group on a GPU; more than {MAX_CHANNELS} per rank outnumber the SMs"
        " and only add steps",
    ),
)


def check_params(strategy: str, params: dict[str, Any], specs: tuple[Param, ...] = COMMON_PARAMS) -> dict[str, int]:
    known = {p.name: p for p in specs}
    unknown = set(params) - set(known)
    if unknown:
        raise ProgramError(
            f"unknown parameter(s) {sorted(unknown)} for strategy '{strategy}' (known: {', '.join(known)})"
        )
    return {name: spec.check(params.get(name, spec.default), f"strategy '{strategy}'") for name, spec in known.items()}


def split_even(count: int, parts: int, unit: int) -> list[tuple[int, int]]:
    """``parts`` (start, length) pieces of [0, count), each a whole number of
    ``unit`` elements except the last; trailing pieces may be empty."""
    per = -(-count // parts) if parts else count
    per = -(-per // unit) * unit
    pieces = []
    for i in range(parts):
        lo = min(count, i * per)
        pieces.append((lo, min(count, lo + per) - lo))
    return pieces


def slices(count: int, slice_elems: int, unit: int) -> list[tuple[int, int]]:
    """Cut [0, count) into slices of ``slice_elems`` (rounded up to ``unit``)."""
    if count <= 0:
        return []
    size = max(unit, -(-max(1, slice_elems) // unit) * unit)
    return [(lo, min(size, count - lo)) for lo in range(0, count, size)]


class Builder:
    """Collects per-rank, per-channel step lists, flags and scratch slots."""

    def __init__(self, inst: Instance, channels: int):
        self.inst = inst
        self.channels = channels
        self.unit = max(1, ALIGN_BYTES // inst.itemsize)
        self.lists: list[list[list[Step]]] = [[[] for _ in range(channels)] for _ in range(inst.ranks)]
        self.flag_counts = [0] * inst.ranks
        self.scratch_used = [0] * inst.ranks
        self.parity_scratch = False  # set by add_call_protocol(parity=True)

    def flag(self, rank: int) -> FlagRef:
        self.flag_counts[rank] += 1
        return FlagRef(rank, self.flag_counts[rank] - 1)

    def scratch(self, rank: int, count: int, like: Ref | None = None) -> Ref:
        """A fresh scratch slot: never reused within a call, so a slot can
        never overlap live data; each starts on a 16-byte boundary. ``like``:
        the slice it will hold, whose per-call clip it takes (variable sizes)."""
        at = -(-self.scratch_used[rank] // self.unit) * self.unit
        self.scratch_used[rank] = at + count
        if like is not None and like.var is not None:
            return Ref(rank, "scratch", at, count, (), like.var, like.at)
        return Ref(rank, "scratch", at, count)

    def add(self, rank: int, channel: int, *steps: Step) -> None:
        self.lists[rank][channel % self.channels].extend(steps)

    def slice_elems(self, slice_bytes: int, count: int, default_pieces: int) -> int:
        if slice_bytes:
            return max(1, slice_bytes // self.inst.itemsize)
        return max(1, -(-count // max(1, default_pieces)))

    def pieces_per_flow(self, flows_on_rank: int) -> int:
        """Default slices per flow: enough that a rank's flows fill its
        channels, no more. A rank with as many flows as channels (all-to-all)
        gives each flow a channel whole; cutting every flow into ``channels``
        pieces would leave each channel as many ops as before, and a chain of
        ops costs a memory round trip each (~1 us on an H200)."""
        return max(1, -(-self.channels // max(1, flows_on_rank)))


def data_op(flow: Flow) -> str:
    return "reduce" if len(flow.sources) > 1 else "copy"


def in_ref(place, lo: int, n: int) -> Ref:
    return _ref(place, "in", lo, n)


def out_ref(place, lo: int, n: int) -> Ref:
    return _ref(place, "out", lo, n)


def _ref(place, buf: str, lo: int, n: int) -> Ref:
    """Elements [lo, lo + n) of a chunk's place; of a chunk of per-call size,
    placed after its buffer's earlier chunks and clipped to the call's count."""
    if place.var is None:
        return Ref(place.rank, buf, place.offset + lo, n)
    return Ref(place.rank, buf, place.offset + lo, n, place.base, place.var, lo)


def _refs(step: Step) -> list[Ref]:
    if isinstance(step, Stage):
        return [step.src, *step.dsts]
    if isinstance(step, Consume):
        return [*step.srcs, *step.dsts]
    return []


def add_call_protocol(b: Builder, parity: bool = False) -> None:
    """Add ready/done flags around every remote access (see module doc).

    Rank q opens its channel 0 with a ``ready`` notify to every rank x that
    touches q's buffers; x's first step touching q waits for it. Every list of
    x that touched q ends with a ``done`` notify to q, and q's channel 0 ends
    waiting for all of them. Executors running every rank in one launch may
    drop both (the launch boundary is the same barrier).

    ``parity``: where x only writes q's scratch and q notifies x (so x waits
    on q in every call), the pair needs neither: the program gets parity
    scratch (model.py), and the one flag exchange its data needs anyway is
    the whole protocol. Where no pair qualifies, nothing changes."""
    ranks = b.inst.ranks
    skip = _parity_pairs(b) if parity else set()
    b.parity_scratch = bool(skip)

    def guarded(step: Step, x: int) -> set[int]:
        """The peers whose memory ``step`` of rank x touches within their ready/done window."""
        return {ref.rank for ref in _refs(step) if ref.rank != x and (ref.rank, x) not in skip}

    touches: dict[tuple[int, int], set[int]] = {}
    for x in range(ranks):
        for c, steps in enumerate(b.lists[x]):
            peers = set().union(*(guarded(step, x) for step in steps))
            if peers:
                touches[(x, c)] = peers
    ready_flag: dict[tuple[int, int], FlagRef] = {}  # (owner q, accessor x) -> flag at x
    for (x, _), peers in sorted(touches.items()):
        for q in sorted(peers):
            if (q, x) not in ready_flag:
                ready_flag[(q, x)] = b.flag(x)
    done_waits: dict[int, list[FlagRef]] = {}
    for (x, c), peers in sorted(touches.items()):
        steps, out, seen = b.lists[x][c], [], set()
        for step in steps:
            needed = sorted(guarded(step, x) - seen)
            if needed:
                seen.update(needed)
                flags = tuple(ready_flag[(q, x)] for q in needed)
                if isinstance(step, Consume):
                    step = Consume(flags + step.waits, step.op, step.srcs, step.dsts)
                else:
                    out.append(Consume(flags, "wait"))
            out.append(step)
        for q in sorted(peers):
            done = b.flag(q)
            done_waits.setdefault(q, []).append(done)
            out.append(Notify(done, "done"))
        b.lists[x][c] = out
    for q in range(ranks):
        opening: list[Step] = []
        readers = sorted(x for (owner, x) in ready_flag if owner == q)
        if readers and b.inst.in_counts[q]:
            opening.append(
                Stage(Ref(q, "in", 0, b.inst.in_counts[q]))
            )  # staged in place: the input is the staging area
        opening.extend(Notify(ready_flag[(q, x)], "ready") for x in readers)
        b.lists[q][0][:0] = opening
        if q in done_waits:
            b.lists[q][0].append(Consume(tuple(done_waits[q]), "wait"))


def _parity_pairs(b: Builder) -> set[tuple[int, int]]:
    """(owner q, accessor x) pairs where every access of x to q's memory
    writes q's scratch and q notifies a flag of x (which x then waits on:
    the validator holds every flag to be waited)."""
    bufs: dict[tuple[int, int], set[tuple[str, bool]]] = {}
    notifies: set[tuple[int, int]] = set()  # (notifier, flag owner)
    for x, chans in enumerate(b.lists):
        for steps in chans:
            for step in steps:
                if isinstance(step, Notify):
                    notifies.add((x, step.flag.rank))
                for ref in _refs(step):
                    if ref.rank != x:
                        bufs.setdefault((ref.rank, x), set()).add((ref.buf, ref in getattr(step, "dsts", ())))
    return {pair for pair, kinds in bufs.items() if kinds == {("scratch", True)} and pair in notifies}


def redirect_outputs_through_scratch(b: Builder) -> None:
    """Make an in-place program safe when its strategy writes outputs that a
    peer may still read as inputs: every write to ``out`` lands in a scratch
    copy instead, every rank signals each rank it touched once its lists are
    through, and each rank copies its scratch copy to ``out`` after all signals.
    Costs one local copy of the output; used only when the direct in-place
    program would race."""
    ranks = b.inst.ranks
    base = [-(-b.scratch_used[r] // b.unit) * b.unit for r in range(ranks)]

    def move(ref: Ref) -> Ref:
        return Ref(ref.rank, "scratch", base[ref.rank] + ref.offset, ref.count) if ref.buf == "out" else ref

    for x in range(ranks):
        for c, steps in enumerate(b.lists[x]):
            new: list[Step] = []
            for step in steps:
                if isinstance(step, Stage):
                    step = Stage(step.src, tuple(move(d) for d in step.dsts))
                elif isinstance(step, Consume):
                    step = Consume(
                        step.waits, step.op, tuple(move(s) for s in step.srcs), tuple(move(d) for d in step.dsts)
                    )
                new.append(step)
            b.lists[x][c] = new
    phase_waits: dict[int, list[FlagRef]] = {q: [] for q in range(ranks)}
    for x in range(ranks):
        for c, steps in enumerate(b.lists[x]):
            for q in sorted({ref.rank for step in steps for ref in _refs(step)} | {x}):
                flag = b.flag(q)
                phase_waits[q].append(flag)
                steps.append(Notify(flag, "data"))
    for q in range(ranks):
        n = b.inst.out_counts[q]
        b.scratch_used[q] = base[q] + n
        if n:
            b.lists[q][0].append(
                Consume(tuple(phase_waits[q]), "copy", (Ref(q, "scratch", base[q], n),), (Ref(q, "out", 0, n),))
            )
        else:
            b.lists[q][0].append(Consume(tuple(phase_waits[q]), "wait"))


def finish(b: Builder, strategy: str, params: dict[str, int], dtype: str, redop: str | None, inplace: bool) -> Program:
    inst = b.inst
    scratch = max(b.scratch_used, default=0)
    if b.parity_scratch:  # the second half starts on a 16-byte boundary, as every slot does
        scratch = -(-scratch // b.unit) * b.unit
    return Program(
        collective=inst.spec.name,
        strategy=strategy,
        params=tuple(sorted(params.items())),
        ranks=inst.ranks,
        root=inst.root,
        count=inst.count,
        dtype=dtype,
        redop=redop if inst.op == "reduce" else None,
        inplace=inplace,
        in_counts=inst.in_counts,
        out_counts=inst.out_counts,
        scratch_count=scratch,
        flag_counts=tuple(b.flag_counts),
        inplace_offsets=inst.inplace_offsets() if inplace else None,
        lists=tuple(tuple(tuple(steps) for steps in chans) for chans in b.lists),
        **_variable_fields(inst),
        **({"parity_scratch": True, "schema": PARITY_SCHEMA} if b.parity_scratch else {}),
    )


def _variable_fields(inst: Instance) -> dict:
    """A variable-size program's counts (names and capacities), in the
    order of the instance's counts vector; nothing for a fixed one."""
    if not inst.count_keys:
        return {}
    names = tuple(key_text(k) for k in inst.count_keys)
    caps = tuple(inst.chunk_counts[k] for k in inst.count_keys)
    return {"count_names": names, "count_caps": caps, "schema": VARIABLE_SCHEMA}


@dataclass(frozen=True)
class Strategy:
    """A plug-in: ``emit`` fills a builder with data steps for an instance."""

    name: str
    summary: str
    emit: Callable[[Builder, dict[str, int]], None]
    params: tuple[Param, ...] = COMMON_PARAMS
    # Parity scratch where it drops a pair's ready/done (add_call_protocol).
    parity: bool = False
