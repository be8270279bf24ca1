"""The CPU reference with each list split over thread blocks (PURLIN_BLOCK_MODEL,
backends/numpy/blocks.py): the datapath's element split, every built-in and
strategy exact under it, and the two faults it exists to catch, which the
plain reference (lists walked whole) passes."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.backends.numpy import NumpyBackend
from purlin_bench.backends.numpy.blocks import BlockSplitRunner, block_model, owners
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.base.errors import PurlinError
from purlin_bench.strategies.derive import derive_program
from purlin_bench.program.model import Consume, Ref, Stage
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES
from purlin_bench.strategies.base import Builder, finish


def test_the_split_is_the_datapaths():
    # float32, sources aligned: 4-element vectors, vector v to thread v mod stride
    assert owners(12, [0], [4], 4, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0]
    # one element before the first 16-byte boundary and two after the last vector go one by one
    assert owners(7, [3], [7], 4, 2).tolist() == [0, 0, 0, 0, 0, 1, 0]
    # sources at different offsets within 16 bytes: element by element
    assert owners(5, [0, 1], [0], 4, 3).tolist() == [0, 1, 2, 0, 1]
    # a fixed program's source and destination at different offsets: element by element
    assert owners(5, [1], [0], 4, 3).tolist() == [0, 1, 2, 0, 1]
    # a variable program's: vectors in the source's alignment (4 bytes past 16:
    # three head elements, one vector, two tail ones), stored element by element
    assert owners(9, [1], [0], 4, 2, variable=True).tolist() == [0, 1, 0, 0, 0, 0, 0, 1, 0]
    # ... but 8-byte elements go one by one
    assert owners(4, [0], [1], 8, 3, variable=True).tolist() == [0, 1, 2, 0]
    # ... and so do ops with several destinations
    assert owners(5, [1], [0, 0], 4, 3, variable=True).tolist() == [0, 1, 2, 0, 1]


def test_the_mode_is_read_and_checked():
    assert block_model({}) is None
    assert block_model({"PURLIN_BLOCK_MODEL": "3"}) == (3, 2)
    assert block_model({"PURLIN_BLOCK_MODEL": "4x8"}) == (4, 8)
    for bad in ("0", "x", "3x0", "2x2x2", "100"):
        with pytest.raises(PurlinError, match="PURLIN_BLOCK_MODEL must be"):
            block_model({"PURLIN_BLOCK_MODEL": bad})


def _exact(runner, inst, redop, seed=0) -> bool:
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-4, 5, n).astype(runner.dtype) for n in inst.in_counts]
    runner.load(inputs)
    runner.run()
    return all(np.array_equal(a, b, equal_nan=True) for a, b in zip(runner.outputs(), inst.reference(inputs, redop)))


@pytest.mark.timeout(120)
# Sizes per call (count: variable) need counts with each call:
# tests/reference/test_variable_reference.py splits them over blocks.
@pytest.mark.parametrize("spec", [s for s in load_all_builtin() if not s.variable], ids=lambda s: s.name)
def test_every_builtin_and_strategy_is_exact_split_over_blocks(spec):
    for ranks, count, blocks, threads in ((2, 33, 3, 1), (3, 1001, 2, 2), (5, 7, 4, 1)):
        inst = instantiate(spec, ranks, count, 4, 1 if spec.rooted else 0)
        redop = "sum" if spec.op == "reduce" else None
        for strategy in STRATEGIES:
            for inplace in (False, True):
                try:
                    program = derive_program(inst, strategy, "float32", redop, {"channels": 2}, inplace)
                except PurlinError:
                    continue  # the strategy or in-place does not apply
                runner = BlockSplitRunner(program, seed=ranks, blocks=blocks, threads=threads)
                assert _exact(runner, inst, redop), f"{spec.name} {strategy} R={ranks} inplace={inplace}"


def _reads_another_blocks_write():
    """One rank: stage the input into scratch, then copy the scratch to the
    output in two halves. Each op splits its own elements over the blocks
    (16-byte vectors round-robin), so the second half's vector 0 is the
    stage's vector 8: with 3 blocks, another block's, and no flag between."""
    inst = instantiate(load_builtin("broadcast"), 1, 64, 4, 0)
    b = Builder(inst, 1)
    scratch = b.scratch(0, 64)
    b.add(0, 0, Stage(Ref(0, "in", 0, 64), (scratch,)))
    for lo in (0, 32):
        b.add(0, 0, Consume((), "copy", (Ref(0, "scratch", lo, 32),), (Ref(0, "out", lo, 32),)))
    return inst, finish(b, "hand", {}, "float32", None, False)


def test_an_op_reading_another_blocks_write_without_a_flag_is_caught():
    inst, program = _reads_another_blocks_write()
    # The whole-list reference runs the ops in order: right, every time.
    assert all(_exact(NumpyRunner(program, seed=s), inst, None) for s in range(5))
    assert owners(32, [32], [32], 4, 3)[0] == 0 and owners(64, [0], [0], 4, 3)[32] == 2
    # Split over 3 blocks, some interleavings run a block ahead into poison.
    assert not all(_exact(BlockSplitRunner(program, seed=s, blocks=3, threads=1), inst, None) for s in range(20))


class _CountedOnce(BlockSplitRunner):
    """A datapath whose waiters take one bump for the whole list: the first
    block to finish its part would release the consumer."""

    def bumps_needed(self) -> int:
        return self.epoch


def test_a_flag_counted_once_for_many_blocks_is_caught():
    spec = load_builtin("all-reduce")
    inst = instantiate(spec, 4, 1001, 4, 0)
    program = derive_program(inst, "push", "float32", "sum", {"channels": 1}, False)
    assert all(_exact(BlockSplitRunner(program, seed=s, blocks=3, threads=2), inst, "sum", s) for s in range(5))
    assert not all(_exact(_CountedOnce(program, seed=s, blocks=3, threads=2), inst, "sum", s) for s in range(20))


def test_the_backend_takes_the_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv("PURLIN_BLOCK_MODEL", "3x4")
    backend = NumpyBackend(2)
    assert "each list split over 3 blocks of 4 threads" in backend.describe()
    inst = instantiate(load_builtin("all-gather"), 2, 9, 4, 0)
    runner = backend.prepare(derive_program(inst, "direct", "float32", None, {}, False))
    assert isinstance(runner, BlockSplitRunner) and (runner.blocks, runner.threads) == (3, 4)


def test_a_steps_destinations_are_split_as_the_datapath_splits_them_into_ops():
    # Each op of at most MAX_DST destinations is split on its own: a 17th
    # destination alone in its op takes SPLIT_LOADS where the first 16 do not.
    from purlin_bench.backends.cupy.codegen.lower import MAX_DST
    from purlin_bench.backends.numpy.blocks import OP_DESTINATIONS

    assert OP_DESTINATIONS == MAX_DST
    assert owners(9, [0], [1] * MAX_DST, 4, 2, variable=True).tolist() == [0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert owners(9, [0], [1], 4, 2, variable=True).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0]
