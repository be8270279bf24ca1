"""The CPU reference executor runs every program right: every collective,
strategy, in-place mode, dtype, reduction, rank count, count and root."""

from __future__ import annotations

import numpy as np
import pytest

from purlin_bench.backends.port import run_once
from purlin_bench.measure.compare import check_program, compare
from purlin_bench.base.dtypes import DTYPES, REDOPS, random_inputs
from purlin_bench.base.errors import ExecutionError, PurlinError, SpecError
from purlin_bench.backends.numpy.executor import NumpyRunner
from purlin_bench.strategies.derive import derive_program
from purlin_bench.spec import instantiate, load_all_builtin, load_builtin
from purlin_bench.strategies import STRATEGIES

# Sizes per call (count: variable) are checked with their counts in tests/reference/test_variable_reference.py.
SPECS = [spec for spec in load_all_builtin() if not spec.variable]
RANKS = (1, 3, 7, 8)
COUNTS = (1001, 1)


def _inplace_modes(inst) -> tuple[bool, ...]:
    try:
        inst.inplace_offsets()
    except SpecError:
        # Only a collective whose input and output chunks do not nest refuses.
        assert inst.spec.name == "all-to-all" and inst.ranks > 1
        return (False,)
    return (False, True)


PAIRS = [(spec, strategy) for spec in SPECS for strategy in STRATEGIES]


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize(("spec", "strategy"), PAIRS, ids=[f"{s.name}-{t}" for s, t in PAIRS])
def test_every_combination_matches_the_reference(spec, strategy, ranks):
    redops = REDOPS if spec.op == "reduce" else (None,)
    ran, failures = 0, []
    for root in range(ranks) if spec.rooted else (0,):
        for count in COUNTS:
            for dtype, np_dtype in DTYPES.items():
                inst = instantiate(spec, ranks, count, np_dtype.itemsize, root)
                for inplace in _inplace_modes(inst):
                    for redop in redops:
                        program = derive_program(inst, strategy, dtype, redop, inplace=inplace)
                        result = check_program(
                            inst, program, NumpyRunner(program, seed=ranks + count), seed=root, calls=1
                        )
                        ran += 1
                        if not result.ok:
                            failures.append(
                                f"root={root} count={count} {dtype}"
                                f" {redop} inplace={inplace}: {result.wrong}/{result.total} wrong"
                            )
    assert ran > 0
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("spec", "strategy"), PAIRS, ids=[f"{s.name}-{t}" for s, t in PAIRS])
def test_repeated_calls_on_one_runner_stay_correct(spec, strategy):
    # Flags are epoch counters never reset: call k waits for k notifies.
    for ranks, inplace in ((3, False), (8, spec.name != "all-to-all")):
        inst = instantiate(spec, ranks, 257, 4, ranks - 1)
        program = derive_program(inst, strategy, "float32", inplace=inplace)
        runner = NumpyRunner(program, seed=7)
        rng = np.random.default_rng(3)
        for call in range(1, 6):
            inputs = random_inputs(rng, program.in_counts, np.dtype(np.float32), program.redop)
            assert compare(inst, program, inputs, run_once(runner, inputs)).ok, f"call {call}"
            assert runner.epoch == call
        # every flag was bumped exactly once per call
        assert set(runner.flags.values()) == {5}


@pytest.mark.parametrize("strategy", ["direct", "push", "two-shot", "ring"])
def test_interleaving_does_not_change_the_result(strategy):
    # A program fixes the order of every reduction, so any legal interleaving
    # (the executor draws one per seed) gives the same bits.
    inst = instantiate(load_builtin("all-reduce"), 5, 999, 2)
    program = derive_program(inst, strategy, "float16", params={"slice_bytes": 256})
    inputs = random_inputs(np.random.default_rng(0), program.in_counts, np.dtype(np.float16), "sum")
    results = [run_once(NumpyRunner(program, seed=s), inputs) for s in range(4)]
    for other in results[1:]:
        assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(results[0], other))
    assert compare(inst, program, inputs, results[0]).ok


def test_copies_are_bit_exact_and_integer_reductions_exact():
    inst = instantiate(load_builtin("all-gather"), 4, 33, 2)
    program = derive_program(inst, "ring", "bfloat16")
    bf16 = DTYPES["bfloat16"]
    inputs = [np.random.default_rng(r).standard_normal(33).astype(bf16) for r in range(4)]
    out = run_once(NumpyRunner(program), inputs)
    expected = np.concatenate(inputs)
    assert all(np.array_equal(o.view(np.uint16), expected.view(np.uint16)) for o in out)

    inst = instantiate(load_builtin("all-reduce"), 3, 10, 4)
    program = derive_program(inst, "ring", "int32", "prod")
    inputs = [np.full(10, v, dtype=np.int32) for v in (-3, 5, 7)]
    assert all(np.array_equal(o, np.full(10, -105, dtype=np.int32)) for o in run_once(NumpyRunner(program), inputs))


def test_float16_reduction_is_within_tolerance_not_exact():
    inst = instantiate(load_builtin("all-reduce"), 8, 4096, 2)
    program = derive_program(inst, "ring", "float16")
    inputs = random_inputs(np.random.default_rng(1), program.in_counts, np.dtype(np.float16), "sum")
    out = run_once(NumpyRunner(program), inputs)
    assert compare(inst, program, inputs, out).ok
    # The ring rounds at every hop; the float64 reference rounds once. They differ
    # somewhere, so the comparison really uses its tolerance.
    assert not all(np.array_equal(o, e) for o, e in zip(out, inst.reference(inputs)))


def test_zero_count_runs_and_outputs_nothing():
    inst = instantiate(load_builtin("all-reduce"), 3, 0, 4)
    program = derive_program(inst, "ring", "float32")
    assert [o.size for o in run_once(NumpyRunner(program), [np.zeros(0, np.float32)] * 3)] == [0, 0, 0]


def test_bad_inputs_are_refused():
    inst = instantiate(load_builtin("all-reduce"), 2, 8, 4)
    runner = NumpyRunner(derive_program(inst, "direct", "float32"))
    with pytest.raises(ExecutionError, match="expected 2 input arrays, got 1"):
        run_once(runner, [np.zeros(8, np.float32)])
    with pytest.raises(ExecutionError, match=r"input of rank 1 has shape \(7,\), expected \(8,\)"):
        run_once(runner, [np.zeros(8, np.float32), np.zeros(7, np.float32)])


def test_unknown_backend():
    from purlin_bench.backends import backend_class

    with pytest.raises(PurlinError, match="unknown backend 'tpu'"):
        backend_class("tpu")
