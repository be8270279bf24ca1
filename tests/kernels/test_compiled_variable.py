"""The compiled datapath for sizes per call (codegen/variable.py), without a
GPU: the generated code's count and slice expressions, read back and
evaluated for a call's counts, must give the slices the program resolves
(program/variable.resolve) for every op; nvcc builds it without spills."""

from __future__ import annotations

import re

import numpy as np
import pytest

from purlin_bench.backends.cupy import CupyBackend
from purlin_bench.backends.cupy.codegen.compiled import MAX_BUILD_WEIGHT, build_weight, options_of
from purlin_bench.backends.cupy.codegen.lower import OP_COPY, OP_NONE, OP_REDUCE, flag_id, lower
from purlin_bench.backends.cupy.codegen import flat
from purlin_bench.backends.cupy.codegen.flat import FLAT_MAX_BYTES
from purlin_bench.backends.cupy.codegen.variable import POOL_MAX_OPS, SHARED, VarOp, VarSlice
from purlin_bench.spec import instantiate, load_builtin
from purlin_bench.spec.variable import DISTRIBUTIONS, draw_counts
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.derive import derive_program
from tests.nvcc_build import assert_builds_without_spills
from tests.kernels.variable_readers import (
    COUNT_LOAD,
    EARLY,
    FLAT,
    POOLED,
    all_overlaps,
    caps_in,
    early_view,
    flat_view,
    generated_view,
    pooled_view,
    reported,
    unordered_overlaps,
)
from tests.unit.test_lower_variable import VARIABLE, expected_view


@pytest.mark.parametrize("flat_max", (flat.FLAT_MAX_BYTES, 0), ids=("flat", "pooled"))
@pytest.mark.parametrize("name", VARIABLE)
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("ranks", (1, 3, 5, 8))
def test_the_generated_code_sizes_every_slice_as_the_program_resolves_it(name, strategy, ranks, flat_max, monkeypatch):
    # These small launches run flat; with no flat bound they show the pooled walk's code instead.
    monkeypatch.setattr(flat, "FLAT_MAX_BYTES", flat_max)
    inst = instantiate(load_builtin(name), ranks, 29, 4)
    rng = np.random.default_rng(ranks)
    for params in ({}, {"slice_bytes": 32, "channels": 2}):
        program = derive_program(inst, strategy, "float32", params=params)
        low = lower(program, list(range(ranks)), True, "sm", flag_id)
        if build_weight(low) > MAX_BUILD_WEIGHT:
            continue  # refused before any code is made (test_compiled_source)
        source = CupyBackend(ranks).source(program, kernel="compiled")
        # The prologue defines var_move and store_one.
        moves = source.count("var_move(") - 1 + source.count("move_one(OP_") + source.count(EARLY)
        assert moves == int((low.ops["op"] != OP_NONE).sum())
        assert "const i64* __restrict__ counts) {" in source
        wild = [10**9, -5, *[inst.count] * len(inst.count_keys)][: len(inst.count_keys)]
        every = [(0,) * len(inst.count_keys), (inst.count,) * len(inst.count_keys), wild]
        for counts in every + [draw_counts(inst, d, rng) for d in DISTRIBUTIONS]:
            clamped = [max(0, min(int(n), inst.count)) for n in counts]
            expected = expected_view(program, clamped)
            if POOLED in source or FLAT in source:
                # Every op may run beside every other: none may touch what another writes.
                assert not all_overlaps(expected), (name, strategy, ranks, params, counts)
                for grid in (1, 3, 40):
                    if POOLED in source:
                        got = pooled_view(source, list(counts), grid)
                    elif EARLY in source:
                        windows = [int(op["count"]) for op in low.ops if int(op["op"]) != OP_NONE]
                        got = early_view(source, list(counts), grid, windows)
                    else:
                        got = flat_view(source, list(counts), grid)
                    assert [g for g in got if g] == [e for e in expected if e[0]], (name, strategy, grid, counts)
                continue
            got = generated_view(source, list(counts))
            # ops in the source's order are lower's: groups by rank, then channel
            assert got == expected, (name, strategy, ranks, params, counts)
            assert not unordered_overlaps(source, list(counts)), (name, strategy, ranks, params, counts)
        assert caps_in(source, len(inst.count_keys)) == [inst.count] * len(inst.count_keys)
        first_bad = [inst.count] * len(inst.count_keys)
        for k, n in ((len(first_bad) - 1, inst.count + 1), (len(first_bad) // 2, -3)):
            first_bad[k] = n  # the lower id wins when two are bad
        assert reported(source, first_bad) == min((k, n) for k, n in enumerate(first_bad) if not 0 <= n <= inst.count)
        assert reported(source, [inst.count] * len(inst.count_keys)) is None


def test_a_group_reading_many_counts_keeps_them_in_shared_memory_and_a_small_one_in_registers():
    # Groups with flags to wait on (no launch pools them): ring all-to-all-v's read all 64, push reduce-scatter-v's 8.
    inst = instantiate(load_builtin("all-to-all-v"), 8, 1001, 4)
    ring = CupyBackend(8).source(derive_program(inst, "ring", "float32"), kernel="compiled")
    assert f"__shared__ i64 {SHARED}[64];" in ring and "__syncthreads();  // the group's counts" in ring
    assert POOLED not in ring
    inst = instantiate(load_builtin("reduce-scatter-v"), 8, 1001, 4)
    push = CupyBackend(8).source(derive_program(inst, "push", "float32", "sum"), kernel="compiled")
    assert SHARED not in push.split('extern "C"', 1)[1] and COUNT_LOAD.search(push) and POOLED not in push


def test_a_launch_without_flags_pools_its_blocks_over_its_few_ops_and_one_with_many_does_not():
    # 8 ops of 2**17 elements at capacity, 4 MiB of windows: past the flat bound
    inst = instantiate(load_builtin("all-gather-v"), 8, 1 << 17, 4)
    push = CupyBackend(8).source(derive_program(inst, "push", "float32"), kernel="compiled")
    body = push.split(POOLED, 1)[1]
    assert "switch (blockIdx.x" not in body and body.count("var_move(") == 8 and FLAT not in push
    assert f"__shared__ i64 {SHARED}[8];" in body  # the counts of every op, read once a block
    # all-to-all-v's 64 ops ran 0.14-0.46x torch pooled against 0.41-0.97x grouped (D53)
    inst = instantiate(load_builtin("all-to-all-v"), 8, 1001, 4)
    push = CupyBackend(8).source(derive_program(inst, "push", "float32", params={"channels": 8}), kernel="compiled")
    assert POOLED not in push and "switch (blockIdx.x" in push
    assert POOL_MAX_OPS < 64


def test_a_small_launch_runs_flat_with_its_counts_in_registers_up_to_the_flat_bound():
    def source(count: int, name: str = "all-gather-v", strategy: str = "push", ranks: int = 8) -> str:
        inst = instantiate(load_builtin(name), ranks, count, 4)
        redop = "sum" if inst.op == "reduce" else None
        return CupyBackend(ranks).source(derive_program(inst, strategy, "float32", redop), kernel="compiled")

    most = FLAT_MAX_BYTES // (8 * 4)  # 8 ops, each a window of the capacity, 4 bytes an element
    small, edge, past = source(1001), source(most), source(most + 1)
    assert FLAT in small and FLAT in edge and POOLED in past and FLAT not in past
    body = small.split(FLAT, 1)[1]
    # No barrier and no shared memory: each thread loads the 8 counts itself, then moves single elements;
    # all-gather-v's sources start at 0 whatever the counts, so its loads go before the counts are back.
    assert "__syncthreads" not in body and SHARED not in body and len(COUNT_LOAD.findall(body)) == 8
    assert "var_move(" not in body and "move_one(" not in body and body.count(EARLY) == 8
    # Past EARLY_SOURCES_MAX_BYTES of spans a flat all-gather-v waits for its counts, then walks only them.
    most = flat.EARLY_SOURCES_MAX_BYTES // (8 * 4)
    assert EARLY in source(most).split(FLAT, 1)[1] and EARLY not in source(most + 1).split(FLAT, 1)[1]
    assert "move_one(OP_COPY, 0, 1, 8, src, dst); continue; }" in source(most + 1).split(FLAT, 1)[1]
    # The first element's load is written before the count loads, outside any loop: in a loop nvcc put the
    # counts' clamps ahead of it, and the thread waited for the counts before it loaded (sm_90 SASS).
    assert body.index("S x = load(g);") < body.index("__ldg(counts + 0)") < body.index("for (")
    # reduce-scatter-v direct: op k's sources lie past the counts of ops 0..k-1, so element g of the
    # call's run is element g of every input: all 8 loaded and summed once, before the counts say where it goes.
    body = source(1001, "reduce-scatter-v", "direct").split(FLAT, 1)[1]
    assert "move_one(" not in body and body.count(EARLY) == 8 and body.count("value_one(OP_REDUCE, 0, 8, src)") == 1
    assert body.index("S x = load(g);") < body.index("__ldg(counts + 0)") < body.index("for (")
    # two-shot's ops (8 at 4 ranks) move parts of counts: each thread finds its op from the counts first.
    body = source(5, "reduce-scatter-v", "two-shot", ranks=4).split(FLAT, 1)[1]
    assert EARLY not in body and "move_one(OP_REDUCE, 0, 4, 1, src, dst); continue; }" in body
    # The counts' check runs on the grid's last thread, which has no element to move here, not on element 0's.
    assert "if (blockIdx.x == gridDim.x - 1 && threadIdx.x == blockDim.x - 1) {" in small


def test_a_flat_launch_loads_before_its_counts_only_where_no_count_moves_its_loads():
    caps = (4, 4, 4)

    def run(j: int, offset: int = 0, base: int = 0, window: int = 4, at: int = 0) -> VarOp:
        """Op j of a reduce-scatter-v-like run: two sources past the counts of ops 0..j-1."""
        before = tuple(range(j))
        sources = (VarSlice(base, offset, before), VarSlice(3, offset, before))
        return VarOp(j, at, window, (*sources, VarSlice(6 + j, 0, ())))

    def ops(*kinds: int) -> list[dict]:
        return [{"op": k, "nsrc": 2} for k in kinds]

    reduce3 = ops(OP_REDUCE, OP_REDUCE, OP_REDUCE)
    assert flat.early(reduce3, [run(0), run(1), run(2)], caps, 4) == "run"
    assert flat.early(reduce3, [run(0), None, run(2)], caps, 4) is None  # op 2 lies past a count no op before it moves
    mixed = ops(OP_REDUCE, OP_COPY, OP_REDUCE)
    assert flat.early(mixed, [run(0), run(1), run(2)], caps, 4) is None  # one load, one kind
    assert flat.early(reduce3, [run(0), run(1, window=3), run(2)], caps, 4) is None  # op 1 moves part of its count
    assert flat.early(reduce3, [run(0), run(1, at=1), run(2)], caps, 4) is None
    assert flat.early(reduce3, [run(0), run(1, offset=1), run(2)], caps, 4) is None  # not where op 0's run goes on
    assert flat.early(reduce3, [run(0), run(1, base=9), run(2)], caps, 4) is None
    # No count moves any source: each op's window is known before the counts (all-gather-v).
    fixed = [VarOp(j, 0, 4, (VarSlice(j, 0, ()), VarSlice(9, 0, tuple(range(j))))) for j in range(3)]
    assert flat.early([{"op": OP_COPY, "nsrc": 1}] * 3, fixed, caps, 4) == "sources"
    # ... up to EARLY_SOURCES_MAX_BYTES of spans: past it the loads of elements no count holds cost more.
    wide = [VarOp(j, 0, flat.EARLY_SOURCES_MAX_BYTES // 12, v.slices) for j, v in enumerate(fixed)]
    wide_caps = (flat.EARLY_SOURCES_MAX_BYTES,) * 3
    assert flat.early([{"op": OP_COPY, "nsrc": 1}] * 3, wide, wide_caps, 4) == "sources"
    assert flat.early([{"op": OP_COPY, "nsrc": 1}] * 3, wide, wide_caps, 8) is None


def test_a_pooled_walk_is_32_bit_only_where_twice_its_weighted_capacity_fits(monkeypatch):
    monkeypatch.setattr(flat, "FLAT_MAX_BYTES", 0)  # 1001 would run flat

    def walk(count: int) -> str:
        inst = instantiate(load_builtin("all-gather-v"), 8, count, 4)
        source = CupyBackend(8).source(derive_program(inst, "push", "float32"), kernel="compiled")
        return re.search(r"typedef (\w+) pool_t;", source)[1]

    # 8 ops of 9 slices: 72 * count elements weighed, the walk reaching past it by at most the grid
    most = (2**31 - 1) // 2 // 72
    assert (walk(1001), walk(most), walk(most + 1), walk(1 << 26)) == ("int", "int", "i64", "i64")


def test_a_fixed_program_generates_no_count_code():
    inst = instantiate(load_builtin("all-to-all"), 8, 1001, 4)
    source = CupyBackend(8).source(derive_program(inst, "push", "float32"), kernel="compiled")
    assert "counts" not in source.split('extern "C"', 1)[1] and "var_move" not in source


@pytest.mark.nvcc
@pytest.mark.timeout(300)
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_variable_sources_build_without_spills(arch, tmp_path):
    # count 4097 runs all-gather-v and reduce-scatter-v flat, 1 << 17 pooled
    builds = [
        ("all-to-all-v", "two-shot", "float32", {}, 4097),
        ("all-to-all-v", "push", "bfloat16", {"channels": 1}, 4097),
        ("all-gather-v", "push", "float32", {}, 4097),
        ("all-gather-v", "push", "float32", {}, 1 << 17),
        ("reduce-scatter-v", "direct", "float32", {}, 4097),
        ("reduce-scatter-v", "direct", "float32", {}, 1 << 17),
    ]
    if arch != "sm_100":
        # On sm_100 these reduces spill (float64 two-shot: 92 bytes; the
        # half-type reduce does in the interpreter too, D44): a B200 pays it.
        builds += [("reduce-scatter-v", "direct", "bfloat16", {}, 1 << 17),
                   ("reduce-scatter-v", "two-shot", "float64", {}, 4097)]
    for name, strategy, dtype, params, count in builds:
        inst = instantiate(load_builtin(name), 8, count, 2 if dtype == "bfloat16" else 4 if dtype == "float32" else 8)
        program = derive_program(inst, strategy, dtype, "sum" if inst.op == "reduce" else None, params)
        source = CupyBackend(8).source(program, kernel="compiled")
        path = tmp_path / "v.cu"
        path.write_text(source)
        options = ["-x", "cu", *options_of(source)]
        assert_builds_without_spills(path, options, arch, f"{name} {strategy} {dtype}", tmp_path / "v.o")
