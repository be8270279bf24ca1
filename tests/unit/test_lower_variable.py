"""The GPU datapath's size table for variable programs (issue 31), without a
GPU: a reading of the lowered table done as atoms/snac.cu does it (packed
offset plus the counts of the slice's base, each clamped to its capacity;
the op's count clipped by its window) must give, for every op and every
call's counts, the slices program/variable.resolve gives."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.backends.cupy.codegen.lower import MAX_SRC, OFFSET_BITS, OP_NONE, VAR_RECORD, flag_id, lower, pack
from purlin_bench.base.errors import ExecutionError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Consume, Stage
from purlin_bench.program.variable import resolve
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts
from purlin_bench.strategies import STRATEGIES

VARIABLE = ("all-gather-v", "reduce-scatter-v", "all-to-all-v")


def kernel_view(vt: np.ndarray, ops: np.ndarray, counts: list[int]):
    """Per op: (count, [(buffer index, offset) per source], [... per destination]) as the kernel resolves them."""
    n, records, ids = int(vt[0]), int(vt[1]), int(vt[2])
    caps = vt[3 : 3 + n]

    def count(i: int) -> int:
        return int(min(max(counts[i], 0), caps[i]))

    out = []
    for o, op in enumerate(ops):
        rec = vt[records + o * VAR_RECORD : records + (o + 1) * VAR_RECORD]
        window = int(op["count"])
        clipped = window if rec[0] < 0 else max(0, min(window, count(int(rec[0])) - int(rec[1])))
        slices = []
        words = [*op["src"][: op["nsrc"]], *op["dst"][: op["ndst"]]]
        for k, word in enumerate(words):
            shift = sum(count(int(i)) for i in vt[ids + rec[2 + 2 * k] : ids + rec[2 + 2 * k] + rec[3 + 2 * k]])
            slices.append((int(word) >> OFFSET_BITS, (int(word) & ((1 << OFFSET_BITS) - 1)) + shift))
        out.append((clipped, slices[: op["nsrc"]], slices[op["nsrc"] :]))
    return out


def expected_view(program, counts):
    """The same from the program: each data step's refs resolved for the call (lower's op order)."""
    caps = program.count_caps
    out = []
    for rank in range(program.ranks):
        for steps in program.lists[rank]:
            for step in steps:
                if isinstance(step, Stage) and step.dsts:
                    srcs, dsts = (step.src,), step.dsts
                elif isinstance(step, Consume) and step.op != "wait":
                    srcs, dsts = step.srcs, step.dsts
                else:
                    continue
                res = [resolve(r, counts, caps) for r in (*srcs, *dsts)]
                view = [(pack(r) >> OFFSET_BITS, r.offset) for r in res]
                out.append((res[0].count, view[: len(srcs)], view[len(srcs) :]))
    return out


@pytest.mark.parametrize("name", VARIABLE)
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("ranks", (1, 3, 5, 8))
def test_the_kernels_reading_of_the_size_table_is_the_programs_resolution(name, strategy, ranks):
    inst = instantiate(load_builtin(name), ranks, 29, 4)
    rng = np.random.default_rng(ranks)
    for params in ({}, {"slice_bytes": 32, "channels": 2}):
        program = derive_program(inst, strategy, "float32", params=params)
        low = lower(program, list(range(ranks)), True, "sm", flag_id)
        assert low.sizes is not None and low.sizes.dtype == np.int32
        data = low.ops[low.ops["op"] != OP_NONE]
        assert (low.ops["nsrc"] <= MAX_SRC).all()
        every = [(0,) * len(inst.count_keys), (inst.count,) * len(inst.count_keys)]
        for counts in every + [draw_counts(inst, d, rng) for d in DISTRIBUTIONS]:
            got = kernel_view(low.sizes, low.ops, list(counts))
            moving = [g for g, op in zip(got, low.ops) if op["op"] != OP_NONE]
            assert len(moving) == len(data)
            assert moving == expected_view(program, counts), (name, strategy, ranks, params, counts)


def test_a_count_past_its_capacity_is_clamped_where_the_kernel_reads_it():
    inst = instantiate(load_builtin("all-to-all-v"), 3, 16, 4)
    program = derive_program(inst, "direct", "float32")
    low = lower(program, [0, 1, 2], True, "sm", flag_id)
    wild = [10**9, -5, *[16] * 7]
    clamped = [16, 0, *[16] * 7]
    assert kernel_view(low.sizes, low.ops, wild) == kernel_view(low.sizes, low.ops, clamped)
    for count, srcs, dsts in kernel_view(low.sizes, low.ops, wild):
        for buffer, offset in (*srcs, *dsts):
            assert 0 <= offset and offset + count <= program.buffer_count(
                buffer // 3, ("in", "out", "scratch")[buffer % 3]
            )


def test_fixed_programs_carry_no_size_table_and_copy_engines_refuse_variable_ones():
    fixed = derive_program(instantiate(load_builtin("all-gather"), 4, 16, 4), "direct", "float32")
    assert lower(fixed, [0, 1, 2, 3], True, "sm", flag_id).sizes is None
    variable = derive_program(instantiate(load_builtin("all-gather-v"), 4, 16, 4), "direct", "float32")
    with pytest.raises(ExecutionError, match="variable-size program runs on SMs"):
        lower(variable, [0, 1, 2, 3], True, "ce", flag_id)
