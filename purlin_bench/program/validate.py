"""Prove a program correct before anything runs it.

Checks, in order:

1. **Shape**: every slice lies inside its buffer, copies move equal counts,
   a rank waits only on its own flags, every flag is notified exactly once and
   waited on, ``ready`` notifies open their list, an out-of-place program
   never writes an input.
2. **No deadlock**: a walk that runs any step whose flags are set finishes.
3. **Happens-before** (vector clocks over the lists): every read of out or
   scratch sees a write that happens before it (staged, then notified); no two
   accesses to one element, one of them a write, are unordered (scratch never
   overlaps live data, in-place programs never clobber what a peer still reads);
   a rank's buffers are touched by a peer only after that rank entered the call
   (a step of it happens before) and before it leaves (a step of it happens after);
   with parity scratch (model.py), a peer's write to it needs no entry, but
   some step of the owner must happen before some step of the writer.
4. **Content**: symbolic execution gives, for every output element, the set of
   input elements it holds; it must be exactly what the spec's dataflow says.

A **variable-size** program (program/model.py) is proved for every count
vector at once. Its steps and flags do not depend on the counts, so 2 and 3's
order is the same at all of them; what changes is how much of each slice
moves. The checks that make one run at capacity (every count at its most)
stand for all of them:

* every ref lies in its buffer at every count (its window inside its
  chunk's capacity, its start never before 0), every slice of a data step is
  clipped by the same count and window, so a step moves the same elements
  from every source to every destination, whatever the counts;
* a slice of ``in`` or ``out`` sits where the spec puts its chunk at every
  count: after exactly the chunks that precede it in that buffer, at its
  position in the chunk (so the capacity run's chunk coordinates are the
  packed layout of any call);
* every element carries a tag, (chunk, position), stamped by whoever wrote
  it; a read must find the tag its own window expects, so a value only ever
  flows between slices clipped alike.

Then a call with counts ``n`` runs the capacity run's steps, each restricted
to the elements at positions below its chunk's ``n``: a subset of accesses
(race freedom and the ready/done windows hold for subsets), where every read
element was written by the same writer as at capacity (its writer is clipped
alike, by the tags), so every output element of the call holds what it held at
capacity, which 4 proves is the spec's.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

import numpy as np

from purlin_bench.base.dtypes import resolve_dtype
from purlin_bench.base.errors import DeadlockError, ProgramError
from purlin_bench.program.model import Consume, FlagRef, Notify, Program, Ref, Stage, Step, StepId
from purlin_bench.program.schedule import Walk
from purlin_bench.program.variable import ref_problem, step_clip_problem
from purlin_bench.spec.instance import Instance, key_text

# A symbolic value: the multiset of input elements reduced into an element,
# each as (input rank, shift) meaning in_rank[position + shift].
Term = tuple[tuple[int, int], ...]
MAX_STEPS = 400_000


class ProgramInvalid(ProgramError):
    """A program breaks a SNAC rule; the message names the step and the rule."""


@dataclass
class _Segment:
    start: int
    end: int
    term: Term | None  # None: garbage (never written this call)
    writer: int  # global step number of the last write, -1 for "before the call"
    readers: list[int]
    # Variable sizes: (count index, shift): position x holds chunk position
    # x + shift of that count's chunk. None: untagged (fixed-size programs).
    tag: tuple[int, int] | None = None


class _Memory:
    """An interval map over one rank's physical buffer (in, out or scratch)."""

    def __init__(self, size: int, initial: Term | None, initial_range: tuple[int, int] | None = None):
        self.segs: list[_Segment] = [_Segment(0, size, None, -1, [])]
        if initial_range is not None:
            lo, hi = initial_range
            self._split(lo)
            self._split(hi)
            for seg in self._covering(lo, hi):
                seg.term = initial
        elif initial is not None:
            self.segs[0].term = initial

    def _index(self, at: int) -> int:
        """Index of the segment holding ``at`` (-1 before the first).
        Bisecting on a key keeps a split O(log n): rebuilding a list of starts
        each time made validating a 30k-step program take seconds, and a
        120k-step one minutes."""
        return bisect.bisect_right(self.segs, at, key=_start) - 1

    def _split(self, at: int) -> None:
        i = self._index(at)
        if i < 0 or at <= self.segs[i].start or at >= self.segs[i].end:
            return
        seg = self.segs[i]
        right = _Segment(at, seg.end, _shift_term(seg.term, 0), seg.writer, list(seg.readers), seg.tag)
        seg.end = at
        self.segs.insert(i + 1, right)

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """Segments [i, j) overlapping [lo, hi) (they are sorted and disjoint)."""
        segs = self.segs
        i = max(0, self._index(lo))
        while i < len(segs) and segs[i].end <= lo:
            i += 1
        j = i
        while j < len(segs) and segs[j].start < hi:
            j += 1
        return i, j

    def _covering(self, lo: int, hi: int) -> list[_Segment]:
        i, j = self.span(lo, hi)
        return self.segs[i:j]

    def read(self, lo: int, hi: int) -> list[_Segment]:
        self._split(lo)
        self._split(hi)
        return self._covering(lo, hi)


def _start(seg: _Segment) -> int:
    return seg.start


def _shift_term(term: Term | None, delta: int) -> Term | None:
    if term is None:
        return None
    return tuple(sorted((rank, shift + delta) for rank, shift in term))


class _Validator:
    def __init__(self, program: Program, instance: Instance | None):
        self.p = program
        self.inst = instance
        # Variable sizes: where each chunk of per-call size sits, per (rank,
        # buffer): count index -> (the counts before it, capacity offset).
        self.chunks: dict[tuple[int, str], dict[int, tuple[tuple[int, ...], int]]] = {}
        if instance is not None and program.variable:
            for buf, side in (("in", instance.inputs), ("out", instance.outputs)):
                for rank, layout in enumerate(side):
                    at = self.chunks.setdefault((rank, buf), {})
                    for _, place in layout:
                        at[place.var] = (tuple(sorted(place.base)), place.offset)
        self.lists = [(r, c) for r in range(program.ranks) for c in range(len(program.lists[r]))]
        self.list_index = {key: i for i, key in enumerate(self.lists)}

    def fail(self, sid: StepId | None, why: str) -> ProgramInvalid:
        where = f"{sid.text()}: " if sid else ""
        return ProgramInvalid(f"{self.p.collective}/{self.p.strategy}: {where}{why}")

    # -- 1. shape --------------------------------------------------------
    def check_shape(self) -> None:
        p = self.p
        if len(p.lists) != p.ranks:
            raise self.fail(None, f"has lists for {len(p.lists)} ranks, expected {p.ranks}")
        if p.step_count() > MAX_STEPS:
            raise self.fail(None, f"has {p.step_count()} steps (limit {MAX_STEPS}); use larger slices")
        if p.variable and p.inplace_offsets is not None:
            raise self.fail(
                None,
                "a variable-size program has no in-place form (its input would sit at a per-call offset of its output)",
            )
        if len(p.count_names) != len(p.count_caps) or any(c < 0 for c in p.count_caps):
            raise self.fail(None, "its per-call counts' names and capacities do not match")
        half = p.scratch_count * resolve_dtype(p.dtype)[1].itemsize if p.parity_scratch else 0
        if half % 16:
            # Every base starts on 16 bytes (the datapath's vectors), the second half's too.
            raise self.fail(None, f"its parity scratch halves are {half} bytes, not a multiple of 16")
        notified: Counter[FlagRef] = Counter()
        waited: set[FlagRef] = set()
        placed: dict[tuple[int, str, int], tuple[tuple[int, ...], int]] = {}
        for sid, step in p.steps():
            refs: list[Ref] = []
            if isinstance(step, Stage):
                if step.src.rank != sid.rank:
                    raise self.fail(sid, f"stages {step.src.text()}, which is not its own rank's data")
                refs = [step.src, *step.dsts]
                if any(d.count != step.src.count for d in step.dsts):
                    raise self.fail(sid, "stage destinations differ in size from the source")
            elif isinstance(step, Notify):
                self._check_flag(sid, step.flag)
                notified[step.flag] += 1
                if step.role == "ready" and any(
                    not (isinstance(s, Notify) and s.role == "ready") and not (isinstance(s, Stage) and not s.dsts)
                    for s in p.lists[sid.rank][sid.channel][: sid.index]
                ):
                    raise self.fail(sid, "a 'ready' notify must open its list (it says the call has started)")
            elif isinstance(step, Consume):
                for flag in step.waits:
                    self._check_flag(sid, flag)
                    if flag.rank != sid.rank:
                        raise self.fail(sid, f"waits on {flag.text()}, another rank's flag")
                    waited.add(flag)
                refs = [*step.srcs, *step.dsts]
                if step.op == "wait":
                    if step.srcs or step.dsts or not step.waits:
                        raise self.fail(sid, "a wait-only consume has flags and no data")
                else:
                    if not step.srcs or not step.dsts:
                        raise self.fail(sid, f"a {step.op} needs sources and destinations")
                    if step.op == "copy" and len(step.srcs) != 1:
                        raise self.fail(sid, "a copy has exactly one source")
                    if len({r.count for r in refs}) != 1:
                        raise self.fail(sid, "sources and destinations differ in size")
                    if step.op == "reduce" and p.redop is None:
                        raise self.fail(sid, "reduces, but the program has no reduction op")
            else:
                raise self.fail(sid, f"unknown step {step!r}")
            # Out of place, a call leaves its inputs as the caller gave them:
            # the Communicator's zero-copy buffers are the caller's tensors.
            written_in = next((d for d in getattr(step, "dsts", ()) if d.buf == "in"), None)
            if written_in is not None and p.inplace_offsets is None:
                raise self.fail(sid, f"writes {written_in.text()}: an out-of-place program never writes an input")
            for ref in refs:
                self._check_ref(sid, ref)
            moves = isinstance(step, Stage) and bool(step.dsts) or isinstance(step, Consume) and step.op != "wait"
            for ref in refs:
                why = ref_problem(p, ref, moves)
                if why:
                    raise self.fail(sid, why)
                if moves and ref.var is not None and ref.buf != "scratch":
                    self._check_chunk(sid, ref, placed)
            why = step_clip_problem(refs) if moves else None
            if why:
                raise self.fail(sid, why)
        for flag, n in notified.items():
            if n != 1:
                raise self.fail(None, f"{flag.text()} is notified {n} times per call; each flag has one notifier")
            if flag not in waited:
                raise self.fail(None, f"{flag.text()} is notified but nobody waits on it")
        for flag in waited - set(notified):
            raise self.fail(None, f"{flag.text()} is waited on but never notified")

    def _check_chunk(self, sid: StepId, ref: Ref, placed: dict) -> None:
        """A variable slice of in or out lies in its chunk at every count:
        after exactly the chunks before it, at its window's position."""
        where = (tuple(sorted(ref.base)), ref.offset - ref.at)
        if self.inst is None:  # no layout to hold it to: one chunk, one place
            expected = placed.setdefault((ref.rank, ref.buf, ref.var), where)
        else:
            expected = self.chunks.get((ref.rank, ref.buf), {}).get(ref.var)
            if expected is None:
                raise self.fail(sid, f"{ref.text()}: rank {ref.rank}'s {ref.buf} holds no chunk of count {ref.var}")
        if where != expected:
            raise self.fail(
                sid,
                f"{ref.text()} is not where count {ref.var}'s chunk sits in rank {ref.rank}'s "
                f"{ref.buf} at every count (after counts {list(expected[0])}, at {expected[1]})",
            )

    def _check_flag(self, sid: StepId, flag: FlagRef) -> None:
        if not (0 <= flag.rank < self.p.ranks and 0 <= flag.index < self.p.flag_counts[flag.rank]):
            raise self.fail(sid, f"{flag.text()} does not exist")

    def _check_ref(self, sid: StepId, ref: Ref) -> None:
        if not 0 <= ref.rank < self.p.ranks:
            raise self.fail(sid, f"{ref.text()} names a rank out of range")
        size = self.p.buffer_count(ref.rank, ref.buf)
        if ref.offset < 0 or ref.count < 0 or ref.offset + ref.count > size:
            raise self.fail(sid, f"{ref.text()} lies outside {ref.buf} ({size} elements)")

    # -- 2 and 3: order, then memory ------------------------------------
    def run(self) -> None:
        self.check_shape()
        p = self.p
        nlists = len(self.lists)
        walk = Walk(p)
        try:
            order: list[tuple[StepId, Step]] = list(walk.order())
        except DeadlockError:
            # A program that can deadlock is an invalid program, not a failed run:
            # callers (derive_program.s in-place reroute) catch ProgramInvalid.
            raise self.fail(None, f"deadlocks: {walk.blocked()}") from None
        number = {sid: k for k, (sid, _) in enumerate(order)}
        clocks = np.full((len(order), nlists), -1, dtype=np.int64)
        notifier: dict[FlagRef, int] = {}
        last_in_list: dict[int, int] = {}
        for k, (sid, step) in enumerate(order):
            li = self.list_index[(sid.rank, sid.channel)]
            if li in last_in_list:
                clocks[k] = clocks[last_in_list[li]]
            if isinstance(step, Consume):
                for flag in step.waits:
                    np.maximum(clocks[k], clocks[notifier[flag]], out=clocks[k])
            clocks[k, li] = sid.index
            last_in_list[li] = k
            if isinstance(step, Notify):
                notifier[step.flag] = k
        self.order, self.number, self.clocks = order, number, clocks
        self.rank_lists = [[self.list_index[(r, c)] for c in range(len(p.lists[r]))] for r in range(p.ranks)]
        # Per rank: the latest step of every list that happens before some step of that rank.
        self.reach = np.stack(
            [
                clocks[[number[sid] for sid, _ in order if sid.rank == r]].max(axis=0)
                if any(sid.rank == r for sid, _ in order)
                else np.full(nlists, -1)
                for r in range(p.ranks)
            ]
        )
        self._memory_pass()

    def hb(self, a: int, b: int) -> bool:
        """Step number a happens before step number b."""
        if a < 0:
            return True
        sid_a = self.order[a][0]
        return a != b and self.clocks[b, self.list_index[(sid_a.rank, sid_a.channel)]] >= sid_a.index

    def _physical(self, ref: Ref) -> tuple[int, str, int]:
        return self.p.physical(ref)

    def _memory_pass(self) -> None:
        p = self.p
        mem: dict[tuple[int, str], _Memory] = {}
        for r in range(p.ranks):
            if p.inplace_offsets is not None:
                off = p.inplace_offsets[r]
                if p.out_counts[r] >= p.in_counts[r]:
                    mem[(r, "out")] = _Memory(p.out_counts[r], ((r, -off),), (off, off + p.in_counts[r]))
                else:
                    mem[(r, "in")] = _Memory(p.in_counts[r], ((r, 0),))
            else:
                mem[(r, "in")] = _Memory(p.in_counts[r], ((r, 0),))
                mem[(r, "out")] = _Memory(p.out_counts[r], None)
            mem[(r, "scratch")] = _Memory(p.scratch_count, None)
            for var, (_, start) in self.chunks.get((r, "in"), {}).items():
                # Inputs hold their chunks' elements from the start: tagged so.
                for seg in mem[(r, "in")].read(start, start + p.count_caps[var]):
                    seg.tag = (var, -start)
        for k, (sid, step) in enumerate(self.order):
            if isinstance(step, Stage):
                if step.dsts:
                    self._move(k, sid, [step.src], step.dsts, "copy", mem)
            elif isinstance(step, Consume) and step.op != "wait":
                self._move(k, sid, list(step.srcs), step.dsts, step.op, mem)
        if self.inst is not None:
            self._check_outputs(mem)

    def _remote(self, k: int, sid: StepId, ref: Ref, write: bool = False) -> None:
        if ref.rank == sid.rank:
            return
        li = self.list_index[(sid.rank, sid.channel)]
        if self.p.parity_scratch and write and ref.buf == "scratch":
            # No 'ready' needed: this write lands in the half its owner last
            # read two calls ago, and the call between ordered the two iff
            # a step of the owner happens before some step of the writer.
            if not any(self.reach[sid.rank, l] >= 0 for l in self.rank_lists[ref.rank]):
                raise self.fail(
                    sid,
                    f"writes {ref.text()} (parity scratch) though rank {sid.rank} waits on nothing of rank "
                    f"{ref.rank}: two calls on, this write may land before rank {ref.rank} has read this one's",
                )
        elif not any(self.clocks[k, l] >= 0 for l in self.rank_lists[ref.rank]):
            raise self.fail(
                sid, f"touches {ref.text()} before rank {ref.rank} is known to be in this call (no 'ready' from it)"
            )
        if self.reach[ref.rank, li] < sid.index:
            raise self.fail(sid, f"touches {ref.text()} but rank {ref.rank} may finish before it (no 'done' to it)")

    def _move(self, k: int, sid: StepId, srcs: list[Ref], dsts: tuple[Ref, ...], op: str, mem) -> None:
        count = srcs[0].count
        if count == 0:
            return
        # Read every source: contents must be written, and written before us.
        per_src: list[list[tuple[int, int, Term]]] = []  # (lo, hi, term) in position-relative coords
        read_ranges = []
        for ref in srcs:
            self._remote(k, sid, ref)
            rank, buf, off = self._physical(ref)
            pieces = []
            for seg in mem[(rank, buf)].read(off, off + count):
                if seg.term is None:
                    raise self.fail(
                        sid, f"reads {ref.text()}, which holds nothing yet at [{seg.start}:{seg.end}) (missing stage?)"
                    )
                if ref.var is not None and seg.tag is not None and seg.tag != (ref.var, ref.at - off):
                    raise self.fail(
                        sid,
                        f"reads {ref.text()}, whose [{seg.start}:{seg.end}) holds count "
                        f"{seg.tag[0]}'s chunk from position {seg.start + seg.tag[1]}: at some "
                        "counts it was never written (a value must move between slices clipped alike)",
                    )
                if not self.hb(seg.writer, k):
                    wsid = self.order[seg.writer][0]
                    raise self.fail(sid, f"reads {ref.text()}, written by {wsid.text()} with no notify between them")
                seg.readers.append(k)
                pieces.append((seg.start - off, seg.end - off, _shift_term(seg.term, off)))
            per_src.append(pieces)
            read_ranges.append((rank, buf, off))
        result = _combine(per_src, op)
        for ref in dsts:
            self._remote(k, sid, ref, write=True)
            rank, buf, off = self._physical(ref)
            for seg in mem[(rank, buf)].read(off, off + count):
                if not self.hb(seg.writer, k) and seg.writer != k:
                    wsid = self.order[seg.writer][0]
                    raise self.fail(sid, f"writes {ref.text()} while {wsid.text()} may still write it")
                for reader in seg.readers:
                    same_place = reader == k and (rank, buf, off) in read_ranges
                    if reader != k and not self.hb(reader, k) or reader == k and not same_place:
                        rsid = self.order[reader][0]
                        raise self.fail(sid, f"writes {ref.text()} while {rsid.text()} may still read it")
            memory = mem[(rank, buf)]
            memory._split(off)
            memory._split(off + count)
            # Replace the covered segments by the result's pieces.
            first, end = memory.span(off, off + count)
            tag = None if ref.var is None else (ref.var, ref.at - off)
            new = [_Segment(off + lo, off + hi, _shift_term(term, -off), k, [], tag) for lo, hi, term in result]
            memory.segs[first:end] = new

    def _check_outputs(self, mem) -> None:
        inst = self.inst
        for rank, layout in enumerate(inst.outputs):
            for key, place in layout:
                if place.count == 0:
                    continue
                prank, pbuf, poff = self._physical(Ref(rank, "out", place.offset, place.count))
                expected = tuple(sorted((s.rank, s.offset - poff) for s in inst.sources_of(key)))
                for seg in mem[(prank, pbuf)].read(poff, poff + place.count):
                    if seg.term != expected:
                        got = "nothing" if seg.term is None else _term_text(seg.term, seg.start)
                        raise self.fail(
                            None,
                            f"rank {rank} output {key_text(key)} at [{seg.start}:{seg.end}) ends holding {got}, "
                            f"expected {_term_text(expected, seg.start)}",
                        )


def _term_text(term: Term, at: int) -> str:
    return " + ".join(f"in{rank}[{at + shift}...]" for rank, shift in term)


def _combine(per_src: list[list[tuple[int, int, Term]]], op: str) -> list[tuple[int, int, Term]]:
    """Merge the sources' piecewise terms; a reduce unions them (multiset)."""
    if op == "copy":
        return per_src[0]
    cuts = sorted({b for pieces in per_src for lo, hi, _ in pieces for b in (lo, hi)})
    out = []
    idx = [0] * len(per_src)
    for lo, hi in zip(cuts, cuts[1:]):
        terms: list[tuple[int, int]] = []
        for s, pieces in enumerate(per_src):
            while pieces[idx[s]][1] <= lo:
                idx[s] += 1
            terms.extend(pieces[idx[s]][2])
        out.append((lo, hi, tuple(sorted(terms))))
    return out


def validate(program: Program, instance: Instance | None = None) -> Program:
    """Raise :class:`ProgramInvalid` unless ``program`` obeys every SNAC rule
    (and, given ``instance``, computes exactly its dataflow). Returns it."""
    _Validator(program, instance).run()
    return program
