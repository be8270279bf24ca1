"""Render a Program for a person: one table per rank and channel, and a summary.

Everything here is a pure function of the program. The row and summary
builders return plain data (strings and numbers) so that the text rendering,
the rich rendering and the tests all read the same facts; ``purlin show``
only prints what these return.

Conventions in the rendered text:

* a slice is ``buf[lo:hi)`` (elements, half-open) on the step's own rank, and
  ``rK.buf[lo:hi)`` on rank K, so every remote access is visible at a glance;
* a flag is ``rK.flag[i]``: word ``i`` of rank K (only rank K waits on it);
* the role of a waited flag is the role of the Notify that bumps it, so a
  Consume shows what it waits for (``ready``, ``data`` or ``done``);
* in a variable-size program a slice whose place and length come from the
  call's counts ``n0, n1, ...`` is ``buf[n0+n1+512:+n2[512:1024])``: it starts
  512 elements into the chunk that follows those of n0 and n1, and holds what
  of count 2's window [512, 1024) the call's n2 covers.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.program.model import Consume, FlagRef, Notify, Program, Ref, Stage, Step, StepId
from purlin_bench.program.variable import runtime_text
from purlin_bench.program.schedule import flag_hops

COLUMNS = ("#", "kind", "action", "peer", "reads", "writes", "flag", "role")


@dataclass(frozen=True)
class StepRow:
    """One step, as the columns of :data:`COLUMNS` show it."""

    index: int
    kind: str  # Stage | Notify | Consume
    action: str  # e.g. "push", "reduce (pull)", "wait", "ready"
    peers: tuple[int, ...]  # other ranks this step touches or hears from
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    flags: tuple[str, ...]  # the flag a Notify bumps, or the flags a Consume waits on
    role: str

    def cells(self) -> tuple[str, ...]:
        peers = ",".join(f"r{p}" for p in self.peers) or "-"
        return (
            str(self.index),
            self.kind,
            self.action,
            peers,
            " + ".join(self.reads) or "-",
            ", ".join(self.writes) or "-",
            ", ".join(self.flags) or "-",
            self.role or "-",
        )


@dataclass(frozen=True)
class RankTraffic:
    """What one rank's steps do to other ranks' memory, in references and elements."""

    rank: int
    steps: int
    remote_reads: int
    remote_writes: int
    read_elems: int
    write_elems: int
    reads_from: tuple[int, ...]  # ranks whose memory it reads (itself included)
    writes_to: tuple[int, ...]  # ranks whose memory it writes (itself included)


@dataclass(frozen=True)
class Summary:
    steps: int
    stages: int
    notifies: int
    consumes: int
    channels: int
    flags: int  # flag words over all ranks (each bumped once per call)
    hops: int  # flag hops on the critical path (schedule.flag_hops)
    scratch_elems: int  # per rank
    scratch_bytes: int
    parity: bool  # two halves of scratch, alternating by call
    remote_reads: int  # source slices read from another rank's memory
    remote_writes: int  # destination slices written into another rank's memory
    remote_read_bytes: int
    remote_write_bytes: int
    per_rank: tuple[RankTraffic, ...]


def slice_text(ref: Ref, here: int, caps: tuple[int, ...] = ()) -> str:
    """``in[0:128)`` on rank ``here``, ``r3.in[0:128)`` elsewhere (``caps``:
    a variable-size program's capacities, for its symbolic slices)."""
    where = "" if ref.rank == here else f"r{ref.rank}."
    if ref.symbolic:
        return f"{where}{ref.buf}[{runtime_text(ref, caps)})"
    return f"{where}{ref.buf}[{ref.offset}:{ref.offset + ref.count})"


def notifiers(program: Program) -> dict[FlagRef, tuple[StepId, Notify]]:
    """Which step bumps each flag (a valid program has exactly one per flag)."""
    return {step.flag: (sid, step) for sid, step in program.steps() if isinstance(step, Notify)}


def _reads_writes(step: Step) -> tuple[tuple[Ref, ...], tuple[Ref, ...]]:
    if isinstance(step, Stage):
        return (step.src,), step.dsts
    if isinstance(step, Consume):
        return step.srcs, step.dsts
    return (), ()


def _action(step: Step, here: int) -> str:
    if isinstance(step, Notify):
        return "release"  # a release store of the epoch into the flag word
    if isinstance(step, Stage):
        if not step.dsts:
            return "in place"  # the input itself is the staging place
        return "push" if any(d.rank != here for d in step.dsts) else "copy"
    if step.op == "wait":
        return "wait"
    ways = [w for w, refs in (("pull", step.srcs), ("push", step.dsts)) if any(r.rank != here for r in refs)]
    return f"{step.op} ({', '.join(ways)})" if ways else step.op


def step_row(step: Step, sid: StepId, who: dict[FlagRef, tuple[StepId, Notify]], caps: tuple[int, ...] = ()) -> StepRow:
    """The row of one step; ``who`` is :func:`notifiers` of its program."""
    here = sid.rank
    reads, writes = _reads_writes(step)
    peers = {r.rank for r in (*reads, *writes)}
    flags: tuple[str, ...] = ()
    role = ""
    if isinstance(step, Notify):
        peers.add(step.flag.rank)
        flags = (f"-> {step.flag.text()}",)
        role = step.role
    elif isinstance(step, Consume) and step.waits:
        roles = []
        waits = []
        for flag in step.waits:
            found = who.get(flag)
            origin = f" <- r{found[0].rank}" if found else " <- nobody"
            waits.append(f"{flag.text()}{origin}")
            if found:
                peers.add(found[0].rank)
                roles.append(found[1].role)
        flags = tuple(waits)
        role = "+".join(dict.fromkeys(roles))  # distinct roles, in order
    peers.discard(here)
    return StepRow(
        index=sid.index,
        kind=type(step).__name__,
        action=_action(step, here),
        peers=tuple(sorted(peers)),
        reads=tuple(slice_text(r, here, caps) for r in reads),
        writes=tuple(slice_text(w, here, caps) for w in writes),
        flags=flags,
        role=role,
    )


def rows(program: Program, rank: int, channel: int) -> list[StepRow]:
    """Rows of one (rank, channel) list, in program order."""
    who = notifiers(program)
    steps = program.lists[rank][channel]
    return [step_row(step, StepId(rank, channel, i), who, program.count_caps) for i, step in enumerate(steps)]


def summarize(program: Program) -> Summary:
    _, dtype = resolve_dtype(program.dtype)
    kinds = {"stage": 0, "notify": 0, "consume": 0}
    per_rank = []
    for rank, chans in enumerate(program.lists):
        nsteps = reads = writes = read_elems = write_elems = 0
        reads_from: set[int] = set()
        writes_to: set[int] = set()
        for steps in chans:
            for step in steps:
                nsteps += 1
                kinds[step.kind] += 1
                srcs, dsts = _reads_writes(step)
                reads_from.update(r.rank for r in srcs)
                writes_to.update(w.rank for w in dsts)
                remote_srcs = [r for r in srcs if r.rank != rank]
                remote_dsts = [w for w in dsts if w.rank != rank]
                reads += len(remote_srcs)
                writes += len(remote_dsts)
                read_elems += sum(r.count for r in remote_srcs)
                write_elems += sum(w.count for w in remote_dsts)
        per_rank.append(
            RankTraffic(
                rank,
                nsteps,
                reads,
                writes,
                read_elems,
                write_elems,
                tuple(sorted(reads_from)),
                tuple(sorted(writes_to)),
            )
        )
    return Summary(
        steps=program.step_count(),
        stages=kinds["stage"],
        notifies=kinds["notify"],
        consumes=kinds["consume"],
        channels=program.channels,
        flags=sum(program.flag_counts),
        hops=flag_hops(program),
        scratch_elems=program.scratch_count,
        scratch_bytes=program.scratch_count * dtype.itemsize,
        parity=program.parity_scratch,
        remote_reads=sum(t.remote_reads for t in per_rank),
        remote_writes=sum(t.remote_writes for t in per_rank),
        remote_read_bytes=sum(t.read_elems for t in per_rank) * dtype.itemsize,
        remote_write_bytes=sum(t.write_elems for t in per_rank) * dtype.itemsize,
        per_rank=tuple(per_rank),
    )


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def header(program: Program) -> str:
    """One line naming what the program computes and how it was derived."""
    params = " ".join(f"{k}={v}" for k, v in program.params)
    parts = [
        f"{program.collective} / {program.strategy}",
        f"{program.ranks} ranks",
        f"count {program.count} {program.dtype}"
        if not program.variable
        else f"counts per call, each at most {program.count} {program.dtype}",
    ]
    if program.redop:
        parts.append(f"reduce {program.redop}")
    parts.append("in place" if program.inplace else "out of place")
    if program.root:
        parts.append(f"root {program.root}")
    if params:
        parts.append(params)
    return ", ".join(parts)


def summary_lines(program: Program, summary: Summary | None = None) -> list[str]:
    s = summary or summarize(program)
    buffers = ", ".join(f"r{r}: in {program.in_counts[r]} out {program.out_counts[r]}" for r in range(program.ranks))
    counts = []
    if program.variable:
        # What n0, n1, ... in the slices below are: one per chunk name.
        names = ", ".join(f"n{k} = {name}" for k, name in enumerate(program.count_names))
        counts = [
            f"counts (given per call, each 0..{max(program.count_caps)}): {names}",
            "sizes below: slices as the counts place and clip them; steps and flags never change",
        ]
    return counts + [
        f"steps: {s.steps} ({s.stages} stage, {s.notifies} notify, {s.consumes} consume)"
        f" over {program.ranks} ranks x {s.channels} channel(s)",
        f"flags: {s.flags} (each bumped once per call; epoch counters, no reset);"
        f" {s.hops} flag hop(s) on the critical path (round trips a call where ranks are processes)",
        f"scratch: {s.scratch_elems} elements per rank ({human_bytes(s.scratch_bytes)})"
        + (", twice: halves alternating by call (parity scratch)" if s.parity else ""),
        f"remote reads: {s.remote_reads} slices ({human_bytes(s.remote_read_bytes)});"
        f" remote writes: {s.remote_writes} slices ({human_bytes(s.remote_write_bytes)})",
        f"buffers (elements): {buffers}",
    ]


def _list_title(rank: int, channel: int, count: int) -> str:
    return f"rank {rank} / channel {channel} ({count} steps)"


_KIND_STYLE = {"Stage": "cyan", "Notify": "magenta", "Consume": "green"}


def render_rich(program: Program) -> RenderableType:
    """The header, the summary lines and one table per (rank, channel) list:
    what ``purlin show`` prints."""
    parts: list[RenderableType] = [Text(header(program), style="bold")]
    parts.extend(Text(line) for line in summary_lines(program))
    for rank, chans in enumerate(program.lists):
        for channel in range(len(chans)):
            found = rows(program, rank, channel)
            table = Table(
                title=_list_title(rank, channel, len(found)), title_justify="left", show_edge=False, pad_edge=False
            )
            for name in COLUMNS:
                table.add_column(name, justify="right" if name == "#" else "left", overflow="fold")
            for row in found:
                cells = row.cells()
                table.add_row(*cells[:1], Text(cells[1], style=_KIND_STYLE[row.kind]), *cells[2:])
            parts.append(Text(""))
            parts.append(table)
    return Group(*parts)
