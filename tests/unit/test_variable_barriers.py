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


def _same_buffer(base: int) -> tuple[int, int]:
    return base, 0  # each base a buffer of its own, starting at its element 0


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
    assert may_overlap([(write, 1)], elsewhere, 1, lambda base: (1 if base == 4 else base, 0))  # bases 1, 4: one buffer
    # One buffer, base 4 starting 8 elements past base 1 (as an in-place output within its input).
    assert not may_overlap([(write, 1)], elsewhere, 1, lambda base: (1, 8) if base == 4 else (base, 0))
    assert may_overlap([(write, 1)], elsewhere, 1, lambda base: (1, 7) if base == 4 else (base, 0))


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


def test_each_slice_is_bounded_by_its_own_ops_window_and_clip():
    # A review's mutant bounded a slice of the earlier op by the later op's
    # window and clip: it let these two write base 1 [8:16) unordered
    # (c0 = 16, c1 = 8).
    wide = _op(0, 0, 16, (0, 0, ()), (1, 0, ()))
    narrow = _op(1, 0, 8, (2, 0, ()), (1, 8, ()))
    assert may_overlap([(wide, 1)], narrow, 1, _same_buffer)
    assert may_overlap([(narrow, 1)], wide, 1, _same_buffer)


def test_may_overlap_is_sound_for_every_count_on_random_pairs_of_ops():
    """Two random ops (several slices, their own windows, clips and starts):
    whenever may_overlap lets them go unordered, no count vector makes them
    touch a common element with one of them writing it."""
    rng = np.random.default_rng(11)
    caps = (3, 2, 4, 1)
    every = list(itertools.product(*(range(c + 1) for c in caps)))

    def draw() -> tuple[VarOp, int]:
        clip = None if rng.random() < 0.25 else int(rng.integers(0, 4))
        nsrc, ndst = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        slices = []
        for _ in range(nsrc + ndst):
            ids = tuple(sorted(rng.choice(4, size=int(rng.integers(0, 3)), replace=False).tolist()))
            slices.append((int(rng.integers(0, 2)), int(rng.integers(0, 10)), ids))
        return _op(clip, int(rng.integers(0, 4)), int(rng.integers(1, 6)), *slices), nsrc

    def touched(op: VarOp, nsrc: int, counts) -> list[tuple[int, int, int, bool]]:
        return [(s.base, *_range(s, op, counts), k >= nsrc) for k, s in enumerate(op.slices)]

    unordered = 0
    for _ in range(1500):
        (a, na), (b, nb) = draw(), draw()
        if may_overlap([(a, na)], b, nb, _same_buffer):
            continue
        unordered += 1
        for counts in every:
            for base_a, lo_a, hi_a, writes_a in touched(a, na, counts):
                for base_b, lo_b, hi_b, writes_b in touched(b, nb, counts):
                    meet = base_a == base_b and max(lo_a, lo_b) < min(hi_a, hi_b)
                    assert not (meet and (writes_a or writes_b)), (a, na, b, nb, counts)
    assert unordered > 150  # enough pairs let go unordered to mean something
