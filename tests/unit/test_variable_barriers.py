"""Where the compiled datapath for sizes per call may leave out a barrier
(codegen/variable.may_overlap): two ops may follow each other unordered only
if no call's counts make them touch a common element, one writing it. The
programs the strategies derive never need one (every packed chunk ends where
the next one's counts begin), so the rule is checked here on ops made by
hand and on random ones against every count the capacities allow."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from purlin_bench.backends.cupy.codegen.variable import VarOp, VarSlice, _ends_before, may_overlap


def _op(clip, at, window, *slices) -> VarOp:
    return VarOp(clip, at, window, tuple(VarSlice(base, offset, ids) for base, offset, ids in slices))


def _same_buffer(base: int) -> int:
    return base


def _range(s: VarSlice, op: VarOp, counts) -> tuple[int, int]:
    """[lo, hi) of ``s`` for ``counts`` (already within their capacities), as the generated code computes it."""
    n = op.window if op.clip is None else min(max(counts[op.clip] - op.at, 0), op.window)
    lo = s.offset + sum(counts[i] for i in s.ids)
    return lo, lo + n


def test_consecutive_slices_of_a_chunk_and_consecutive_chunks_are_disjoint():
    # chunk 0 (count c0) in slices of 8, then chunk 1 past it
    first, second = _op(0, 0, 8, (1, 0, ())), _op(0, 8, 8, (1, 8, ()))
    last_of_0, start_of_1 = _op(0, 8, 8, (1, 8, ())), _op(1, 0, 8, (1, 0, (0,)))
    assert _ends_before(first.slices[0], first, second.slices[0])
    assert _ends_before(last_of_0.slices[0], last_of_0, start_of_1.slices[0])
    assert not _ends_before(second.slices[0], second, first.slices[0])


@pytest.mark.parametrize(
    "a, b",
    [
        (_op(0, 0, 8, (1, 0, ())), _op(0, 0, 8, (1, 0, ()))),  # the same slice
        (_op(0, 0, 8, (1, 0, ())), _op(0, 7, 8, (1, 7, ()))),  # one element short of the window
        (_op(0, 0, 8, (1, 0, ())), _op(1, 0, 8, (1, 0, ()))),  # b does not start past a's count
        (_op(1, 0, 8, (1, 0, (1,))), _op(2, 0, 8, (1, 0, (1,)))),  # a's end moves with c1 twice, b's once
        (_op(None, 0, 8, (1, 0, (0,))), _op(None, 20, 8, (1, 20, ()))),  # b not past c0: c0 = 20 overlaps
    ],
)
def test_slices_that_may_share_an_element_are_not_proven_disjoint(a, b):
    assert not _ends_before(a.slices[0], a, b.slices[0])


def test_a_barrier_is_kept_only_between_ops_that_may_share_a_written_element():
    write = _op(0, 0, 8, (0, 0, ()), (1, 0, ()))  # reads base 0, writes base 1
    same = _op(0, 0, 8, (0, 0, ()), (1, 0, ()))
    reads_it = _op(0, 0, 8, (1, 0, ()), (2, 0, ()))
    both_read = _op(0, 0, 8, (0, 0, ()), (3, 0, ()))
    next_slice = _op(0, 8, 8, (0, 8, ()), (1, 8, ()))
    assert may_overlap([(write, 1)], same, 1, _same_buffer)
    assert may_overlap([(write, 1)], reads_it, 1, _same_buffer)
    assert may_overlap([(reads_it, 1)], write, 1, _same_buffer)  # either order
    assert not may_overlap([(write, 1)], both_read, 1, _same_buffer)  # only base 0 shared, read by both
    assert not may_overlap([(write, 1)], next_slice, 1, _same_buffer)
    elsewhere = _op(0, 0, 8, (0, 0, ()), (4, 0, ()))
    assert not may_overlap([(write, 1)], elsewhere, 1, _same_buffer)
    assert may_overlap([(write, 1)], elsewhere, 1, lambda base: 1 if base == 4 else base)  # bases 1, 4: one buffer


def test_the_rule_is_sound_for_every_count_on_random_ops():
    """Whenever _ends_before says a slice ends before another, it does for every count vector."""
    rng = np.random.default_rng(7)
    caps = (3, 2, 4)
    every = list(itertools.product(*(range(c + 1) for c in caps)))
    proven = 0
    for _ in range(3000):

        def draw() -> VarOp:
            ids = tuple(sorted(rng.choice(3, size=int(rng.integers(0, 3)), replace=True).tolist()))
            clip = None if rng.random() < 0.3 else int(rng.integers(0, 3))
            return _op(clip, int(rng.integers(0, 4)), int(rng.integers(1, 5)), (0, int(rng.integers(0, 12)), ids))

        a, b = draw(), draw()
        if not _ends_before(a.slices[0], a, b.slices[0]):
            continue
        proven += 1
        for counts in every:
            lo, hi = _range(a.slices[0], a, counts)
            assert hi == lo or hi <= _range(b.slices[0], b, counts)[0], (a, b, counts)
    assert proven > 300  # the draw proves enough pairs to mean something
