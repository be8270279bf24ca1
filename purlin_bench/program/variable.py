"""Variable sizes at run time: a program's refs resolved for one call's counts.

A variable-size program (model.py's module doc) is built once for a capacity;
each call brings a counts vector ``n``, one entry per chunk name, each at most
its capacity. Here are the three things every executor and the validator do
with it: check the counts against the program before anything runs
(:func:`check_counts`), resolve one ref for them (:func:`resolve`: what a
GPU datapath computes per slice from the counts in device memory), and turn
the whole program into the fixed-size program of one call
(:func:`concretize`, for tests and for a datapath that specialises per call).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from purlin_bench.base.errors import CountsError
from purlin_bench.program.model import FIXED_SCHEMA, Consume, Program, Ref, Stage, Step


def check_counts(program: Program, counts: Sequence[int] | None) -> tuple[int, ...]:
    """``counts`` as a tuple of ints, or a CountsError (one line) naming the
    first that is wrong: a variable program needs one count per chunk name,
    each a whole number from 0 to its capacity; a fixed program takes none."""
    if not program.variable:
        if counts is not None:
            raise CountsError(f"{program.collective} has fixed sizes; it takes no per-call counts")
        return ()
    if counts is None:
        raise CountsError(f"{program.collective} takes per-call counts ({len(program.count_caps)}, one per chunk: "
                          f"{_names(program)})")
    values = list(counts)
    if len(values) != len(program.count_caps):
        raise CountsError(f"{program.collective}: {len(values)} counts given, expected {len(program.count_caps)} "
                          f"(one per chunk: {_names(program)})")
    out = []
    for k, (value, cap) in enumerate(zip(values, program.count_caps)):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise CountsError(f"{program.collective}: count {k} ({program.count_names[k]}) is {value!r}, "
                              "not a whole number")
        value = int(value)
        if not 0 <= value <= cap:
            raise CountsError(f"{program.collective}: count {k} ({program.count_names[k]}) is {value}, outside "
                              f"0..{cap} (the capacity the program and its buffers are built for)")
        out.append(value)
    return tuple(out)


def _names(program: Program) -> str:
    names = program.count_names
    return ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:3])}, ..., {names[-1]}"


def resolve(ref: Ref, counts: Sequence[int], caps: Sequence[int]) -> Ref:
    """``ref`` as this call's fixed slice: the offset moved by what the
    chunks before it hold less than their capacity, the count clipped to
    what of its window the call's chunk covers (0 past its end)."""
    if not ref.symbolic:
        return ref
    offset = ref.offset + sum(counts[b] - caps[b] for b in ref.base)
    count = ref.count if ref.var is None else max(0, min(ref.count, counts[ref.var] - ref.at))
    return Ref(ref.rank, ref.buf, offset, count)


def resolve_step(step: Step, counts: Sequence[int], caps: Sequence[int]) -> Step:
    if isinstance(step, Stage):
        return Stage(resolve(step.src, counts, caps), tuple(resolve(d, counts, caps) for d in step.dsts))
    if isinstance(step, Consume):
        return Consume(step.waits, step.op, tuple(resolve(s, counts, caps) for s in step.srcs),
                       tuple(resolve(d, counts, caps) for d in step.dsts))
    return step


def concretize(program: Program, counts: Sequence[int]) -> Program:
    """The fixed-size program one call with ``counts`` runs: every ref
    resolved, the same steps, flags and buffers (at capacity)."""
    n = check_counts(program, counts)
    caps = program.count_caps
    lists = tuple(tuple(tuple(resolve_step(s, n, caps) for s in steps) for steps in chans) for chans in program.lists)
    return replace(program, lists=lists, count_names=(), count_caps=(), schema=FIXED_SCHEMA)


def runtime_text(ref: Ref, caps: Sequence[int]) -> str:
    """How a person reads a symbolic slice: its start and length as
    expressions of the counts, e.g. ``n0+n1+512:+n2[512:1024]``: it starts
    512 elements into the chunk after those of counts 0 and 1, and holds what
    of count 2's window [512, 1024) the call's n2 covers (nothing if n2 <= 512)."""
    start = ref.offset - sum(caps[b] for b in ref.base)
    terms = [f"n{b}" for b in ref.base]
    if start or not terms:
        terms.append(str(start))
    length = f"n{ref.var}[{ref.at}:{ref.at + ref.count}]" if ref.var is not None else str(ref.count)
    return f"{'+'.join(terms)}:+{length}"


def ref_problem(program: Program, ref: Ref, moves: bool) -> str | None:
    """Why ``ref`` cannot be part of ``program`` at every count vector, or
    None. ``moves``: data is read or written through it (a Stage with no
    destination only says its input is staged in place)."""
    caps = program.count_caps
    if not program.variable:
        if ref.symbolic:
            return f"{ref.text()} has sizes that move with per-call counts, in a fixed-size program"
        return None
    if any(not 0 <= b < len(caps) for b in ref.base) or ref.var is not None and not 0 <= ref.var < len(caps):
        return f"{ref.text()} names a count the program does not have (it has {len(caps)})"
    if ref.var in ref.base or len(set(ref.base)) != len(ref.base):
        return f"{ref.text()} counts a chunk twice in its offset"
    if ref.buf == "scratch" and ref.base:
        return f"{ref.text()}: scratch slots sit at fixed offsets, never after a chunk of per-call size"
    if ref.offset - sum(caps[b] for b in ref.base) < 0:
        return f"{ref.text()} starts before its buffer when the counts before it are 0"
    if ref.var is not None and (ref.at < 0 or ref.at + ref.count > caps[ref.var]):
        return f"{ref.text()}: window [{ref.at}:{ref.at + ref.count}) lies outside count {ref.var}'s 0..{caps[ref.var]}"
    if moves and ref.var is None and ref.count:
        return (f"{ref.text()} moves a fixed number of elements in a variable-size program "
                "(whose chunks change size each call)")
    return None


def step_clip_problem(refs: Sequence[Ref]) -> str | None:
    """Every slice of one data step must be clipped alike (same count, same
    window), or at some counts its sources and destinations differ in size."""
    if len({(r.var, r.at, r.count) for r in refs}) > 1:
        shown = ", ".join(r.text() for r in refs)
        return f"its slices are clipped by different per-call counts or windows ({shown})"
    return None
