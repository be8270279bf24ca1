"""int32 reductions wrap (two's complement), in the executor and in the
reference alike: the random inputs the tests check with reach the ends of the
type, so sums and products really overflow (issue 15)."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.backends.port import run_once
from purlin_bench.measure.compare import check_program
from purlin_bench.base.dtypes import REDOPS, accumulate, random_inputs
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES

INT32 = np.dtype(np.int32)
REDUCING = [s for s in load_all_builtin() if s.op == "reduce" and not s.variable]  # -v: test_variable_reference.py


def _wrapped(inst, inputs, redop) -> int:
    """Output elements whose int64 reduction lies outside int32 (so wraps)."""
    n = 0
    for layout in inst.outputs:
        for key, _ in layout:
            parts = [inputs[s.rank][s.offset : s.offset + s.count] for s in inst.sources_of(key)]
            wide = accumulate(parts, redop)
            n += int(np.count_nonzero(wide != wide.astype(np.int32)))
    return n


@pytest.mark.parametrize("redop", REDOPS)
def test_random_int32_inputs_reach_both_ends_of_the_type(redop):
    (x,) = random_inputs(np.random.default_rng(0), [4000], INT32, redop)
    assert x.dtype == INT32
    info = np.iinfo(np.int32)
    assert (x > info.max - 1000).sum() > 500 and (x < info.min + 1000).sum() > 500
    assert (np.abs(x.astype(np.int64)) <= 1000).sum() > 1000  # and small values besides


@pytest.mark.parametrize("spec", REDUCING, ids=[s.name for s in REDUCING])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_reduction_and_strategy_wraps_like_the_reference(spec, strategy):
    for ranks in (2, 3, 8):
        inst = instantiate(spec, ranks, 257, 4, ranks - 1)
        for redop in REDOPS:
            for inplace in (False, True):
                program = derive_program(inst, strategy, "int32", redop, inplace=inplace)
                # check_program's first call draws exactly these inputs.
                inputs = random_inputs(np.random.default_rng(ranks), program.in_counts, INT32, redop)
                if redop in ("sum", "prod"):
                    assert _wrapped(inst, inputs, redop) > 0, "the inputs must overflow int32"
                result = check_program(inst, program, NumpyRunner(program, seed=ranks), seed=ranks)
                assert result.ok, (ranks, redop, inplace, result)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("redop", ["sum", "prod"])
def test_the_wrap_is_twos_complement_modulo_2_to_the_32(strategy, redop):
    # Independent of accumulate: Python integers reduced, then taken mod 2**32.
    inst = instantiate(load_builtin("all-reduce"), 5, 64, 4)
    program = derive_program(inst, strategy, "int32", redop)
    inputs = random_inputs(np.random.default_rng(9), program.in_counts, INT32, redop)
    expected = []
    for e in range(64):
        acc = int(inputs[0][e])
        for x in inputs[1:]:
            acc = acc + int(x[e]) if redop == "sum" else acc * int(x[e])
        acc %= 2**32
        expected.append(acc - 2**32 if acc >= 2**31 else acc)
    expected = np.array(expected, dtype=np.int32)
    for out in run_once(NumpyRunner(program), inputs):
        assert np.array_equal(out, expected)
    assert all(np.array_equal(ref, expected) for ref in inst.reference(inputs, redop))
